"""Rollout engines side by side on one GPU: HF `generate`, HF compiled, vLLM (P5).

Each engine runs in a process of its own (vLLM takes a share of the GPU's memory for itself).
Prompts are arithmetic questions in SmolLM2's chat template, sampled at T=1.0 with up to
--max-tokens new tokens; tokens/s counts the tokens each engine actually returned (eos ends a
response early, the same way in every engine). Per batch size: a first untimed call (for the
compiled engine it compiles: its time is reported as compile time), then --repeats timed calls,
median reported. Peak memory: torch's peak allocation in the process (what the HF engines hold),
and the device's used memory seen by the driver at the end (what vLLM reserved).

Logprob check: 64 sampled responses of each engine are scored again by an eager HF forward of
the same weights in the same dtype, as the trainer scores them; the table gives the mean and max
|logprob difference| per token. The eager engine's own figure is the bf16 noise floor.

Run: `python bench/rollout_engines.py [--engines hf,hf-compiled,vllm] [--batches 256,1024]
      [--max-tokens 128] [--repeats 3] [--dtype bfloat16]`
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import torch

from rft.engines.logprobs import token_logprobs
from rft.engines.models import ModelSpec, load_model
from rft.engines.rollout import RolloutEngineConfig, SamplingParams, create_rollout_engine

ENGINES: dict[str, tuple[str, dict[str, Any]]] = {
    "hf": ("hf", {"enforce_eager": True}),
    "hf-compiled": ("hf", {"enforce_eager": False}),
    "vllm": ("vllm", {"gpu_memory_utilization": 0.6}),
}


def prompts(engine: Any, count: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        messages = [
            {"role": "system", "content": "Answer with only the final number."},
            {"role": "user", "content": f"What is {a} + {b}?"},
        ]
        out.append(engine.chat_prompt_ids(messages))
    return out


def worker(name: str, args: argparse.Namespace) -> None:
    engine_type, options = ENGINES[name]
    spec = ModelSpec(args.model, dtype=args.dtype, device=args.device)
    started = time.perf_counter()
    engine = create_rollout_engine(engine_type, RolloutEngineConfig(model=spec, options=options))
    sync(args.device)
    emit({"engine": name, "kind": "start", "seconds": time.perf_counter() - started})
    params = SamplingParams(temperature=1.0, max_tokens=args.max_tokens)
    gpu = args.device.startswith("cuda")
    for batch in args.batches:
        batch_prompts = prompts(engine, batch, seed=batch)
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        compiled_before = engine.compile_seconds
        t0 = time.perf_counter()
        engine.generate(batch_prompts, params)
        sync(args.device)
        first = time.perf_counter() - t0
        rates, times = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = engine.generate(batch_prompts, params)
            sync(args.device)
            elapsed = time.perf_counter() - t0
            tokens = sum(len(r.response_ids) for group in out for r in group)
            rates.append(tokens / elapsed)
            times.append(elapsed)
        free, total = torch.cuda.mem_get_info() if gpu else (0, 0)
        emit(
            {
                "engine": name,
                "kind": "throughput",
                "batch": batch,
                "tokens_per_s": statistics.median(rates),
                "call_s": statistics.median(times),
                "first_call_s": first,
                "compile_s": engine.compile_seconds - compiled_before,
                "torch_peak_gib": torch.cuda.max_memory_allocated() / 2**30 if gpu else 0.0,
                "device_used_gib": (total - free) / 2**30,
            }
        )
    emit(logprob_check(name, engine, spec, args))


def logprob_check(name: str, engine: Any, spec: ModelSpec, args: argparse.Namespace) -> dict:
    sample = prompts(engine, 64, seed=1)
    out = engine.generate(sample, SamplingParams(temperature=1.0, max_tokens=64))
    reference, _ = load_model(spec)  # eager, the same weights and dtype
    diffs = []
    with torch.inference_mode():
        for group in out:
            r = group[0]
            if len(r.response_ids) == 0:
                continue
            ids = np.concatenate([r.prompt_ids, r.response_ids]).astype(np.int64)
            lp, _ = token_logprobs(
                reference, torch.from_numpy(ids)[None].to(args.device), temperature=1.0
            )
            recomputed = lp[0, len(r.prompt_ids) - 1 :].float().cpu().numpy()
            diffs.append(np.abs(recomputed - r.logprobs))
    flat = np.concatenate(diffs)
    return {
        "engine": name,
        "kind": "logprobs",
        "tokens": int(flat.size),
        "mean_abs": float(flat.mean()),
        "p99_abs": float(np.quantile(flat, 0.99)),
        "max_abs": float(flat.max()),
    }


def sync(device: str) -> None:
    """Wait for queued GPU work, so a host clock read after it covers that work."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def emit(row: dict) -> None:
    print("ROW " + json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="hf,hf-compiled,vllm")
    parser.add_argument("--batches", default="256,1024")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.batches = [int(b) for b in str(args.batches).split(",")]
    if args.worker:
        worker(args.worker, args)
        return
    rows: list[dict] = []
    for name in args.engines.split(","):
        cmd = [sys.executable, __file__, "--worker", name] + sys.argv[1:]
        # each row is printed as the worker reports it: a run cut short still says what it had
        with tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("ROW "):
                    rows.append(json.loads(line[4:]))
                    print(line.rstrip(), flush=True)
            proc.wait()
            if proc.returncode != 0:
                err.seek(0)
                tail = "\n".join(err.read().splitlines()[-15:])
                print(f"\n{name}: exited {proc.returncode}\n{tail}", flush=True)
    report(rows, args)


def report(rows: list[dict], args: argparse.Namespace) -> None:
    hf = {
        r["batch"]: r["tokens_per_s"]
        for r in rows
        if r["kind"] == "throughput" and r["engine"] == "hf"
    }
    print(
        f"\n## rollout throughput, {args.model}, {args.dtype}, T=1.0, "
        f"up to {args.max_tokens} new tokens, median of {args.repeats}\n"
    )
    print(
        "| engine | prompts | tokens/s | × hf | call s | first call s (compile s) | torch peak GiB | device used GiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["kind"] != "throughput":
            continue
        ratio = r["tokens_per_s"] / hf[r["batch"]] if r["batch"] in hf else float("nan")
        print(
            f"| {r['engine']} | {r['batch']} | {r['tokens_per_s']:,.0f} | {ratio:.2f} | "
            f"{r['call_s']:.2f} | {r['first_call_s']:.1f} ({r['compile_s']:.1f}) | "
            f"{r['torch_peak_gib']:.1f} | {r['device_used_gib']:.1f} |"
        )
    starts = [r for r in rows if r["kind"] == "start"]
    if starts:
        print(
            "\nengine start (load + set-up): "
            + ", ".join(f"{r['engine']} {r['seconds']:.0f} s" for r in starts)
        )
    print("\n## logprobs against an eager HF forward of the same weights (64 sampled responses)\n")
    print("| engine | tokens | mean abs diff | p99 abs diff | max abs diff |")
    print("|---|---|---|---|---|")
    for r in rows:
        if r["kind"] == "logprobs":
            print(
                f"| {r['engine']} | {r['tokens']} | {r['mean_abs']:.4f} | {r['p99_abs']:.4f} | "
                f"{r['max_abs']:.4f} |"
            )


if __name__ == "__main__":
    main()
