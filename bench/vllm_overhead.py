"""rft's vLLM rollout engine against vLLM's own `LLM.generate`, on the same engine (issue 19).

One process per (model, engine settings): it starts rft's `vllm` engine, then times, in
alternating rounds on the same prompts,
- `rft`: `VLLMRolloutEngine.generate` (requests added one by one, the step loop, logprobs turned
  into arrays, responses decoded: what the explorer calls);
- `LLM.generate`: vLLM's own offline entry point on the engine's `LLM`, with the very
  `SamplingParams` rft builds (`vllm_sampling_params`: T = 1, the sampled token's logprob, eos
  stop ids, no detokenizing): the ceiling rft's engine is measured against;
- `no logprobs`: `LLM.generate` with the same settings but no logprobs, what asking for the
  sampled token's logprob costs vLLM itself.
The overhead column is 1 - rft / `LLM.generate` tokens/s (the goal: at most 10%), from the
medians; the paired column takes the same ratio within each round (the two calls run back to
back, so a drift of the host or the GPU between rounds cancels) and gives its median; the convert
column is the part of rft's call spent after vLLM returned (outputs into Rollouts: arrays,
logprobs, decoded text), which `LLM.generate` does not do: the overhead that is rft's by
construction, measured inside the call rather than as a difference of two noisy rates. Medians
of --repeats rounds (min-max spread printed per row); tokens/s counts the tokens returned.

Variants are engine settings on top of rft's defaults (an empty variant is rft's defaults):
`max_num_seqs`, `max_cudagraph_capture_size` (vLLM captures CUDA graphs for decode batches up
to that size; its own default min(2 x max_num_seqs, 512) leaves larger batches without them),
`async_scheduling`, and `flat_logprobs` (VLLM_FLAT_LOGPROBS: one flat array per request instead
of a dict and an object per token). The default list starts with vLLM's own defaults, which
were rft's before they were measured here.

Models: `smollm2` (the real SmolLM2-135M-Instruct weights) and `qwen2.5-1.5b-shape` (random
weights in Qwen2.5-1.5B's shape, SmolLM2's vocabulary: throughput only, it answers nothing).

Run (GPU): python -m bench.vllm_overhead --model smollm2 --batches 256,1024
           [--variants "max_num_seqs=1024;max_num_seqs=256;..."] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import torch

from bench.rollout_engines import prompts
from rft.engines.models import ModelSpec
from rft.engines.rollout import RolloutEngineConfig, SamplingParams
from rft.engines.vllm_engine import VLLMRolloutEngine

BEFORE = "max_cudagraph_capture_size=512,async_scheduling=0,flat_logprobs=0"  # vLLM's defaults
DEFAULT_VARIANTS = f"{BEFORE};flat_logprobs=0;"  # the last one: rft's defaults


def parse_variant(text: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Engine options and environment of a variant such as `max_num_seqs=256,flat_logprobs=0`."""
    options: dict[str, Any] = {}
    env: dict[str, str] = {}
    for item in filter(None, text.split(",")):
        name, _, value = (part.strip() for part in item.partition("="))
        if name == "flat_logprobs":
            env["VLLM_FLAT_LOGPROBS"] = value
        elif name == "async_scheduling":
            options[name] = bool(int(value))
        else:
            options[name] = int(value)
    return options, env


def emit(row: dict) -> None:
    print("ROW " + json.dumps(row), flush=True)


def timed(call: Any, batch: list[list[int]]) -> tuple[float, int]:
    torch.cuda.synchronize()
    started = time.perf_counter()
    tokens = call(batch)
    torch.cuda.synchronize()
    return time.perf_counter() - started, tokens


def worker(args: argparse.Namespace) -> None:
    variant, env = parse_variant(args.worker)
    os.environ.update(env)
    options = {"gpu_memory_utilization": args.gpu_memory_utilization, **variant}
    spec = ModelSpec(args.model, dtype=args.dtype, device="cuda")
    started = time.perf_counter()
    engine = VLLMRolloutEngine.from_config(RolloutEngineConfig(model=spec, options=options))
    emit({"variant": args.worker, "kind": "start", "seconds": time.perf_counter() - started})
    params = SamplingParams(temperature=1.0, max_tokens=args.max_tokens)
    with_logprobs = engine.vllm_sampling_params(params, deadline=False)
    without = with_logprobs.clone()
    without.logprobs = None

    converts: list[float] = []

    def rft(batch: list[list[int]]) -> int:
        tokens = sum(len(r[0].response_ids) for r in engine.generate(batch, params))
        converts.append(engine.last_convert_seconds)
        return tokens

    def raw(batch: list[list[int]], sampling: Any) -> int:
        requests = [{"prompt_token_ids": p} for p in batch]
        outs = engine.llm.generate(requests, sampling, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    calls = {
        "rft": rft,
        "LLM.generate": lambda b: raw(b, with_logprobs),
        "no logprobs": lambda b: raw(b, without),
    }
    for size in args.batches:
        batch = prompts(engine, size, seed=size)
        for call in calls.values():  # warm-up: first calls at a new batch size are not timed
            call(batch)
        rates: dict[str, list[float]] = {name: [] for name in calls}
        shares = []
        paired = []  # 1 - rft / LLM.generate within a round
        for _ in range(args.repeats):
            for name, call in calls.items():  # alternated, so drift hits every column alike
                seconds, tokens = timed(call, batch)
                rates[name].append(tokens / seconds)
                if name == "rft":
                    shares.append(converts[-1] / seconds)
            paired.append(1 - rates["rft"][-1] / rates["LLM.generate"][-1])
        emit(
            {
                "variant": args.worker,
                "kind": "throughput",
                "batch": size,
                **{name: statistics.median(values) for name, values in rates.items()},
                "convert_share": statistics.median(shares),
                "paired_overhead": statistics.median(paired),
                "paired_spread": [min(paired), max(paired)],
                "spread": {name: [min(v), max(v)] for name, v in rates.items()},
            }
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--batches", default="256,1024")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.6)
    parser.add_argument("--variants", default=DEFAULT_VARIANTS)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.batches = [int(b) for b in str(args.batches).split(",")]
    if args.worker is not None:
        worker(args)
        return
    rows: list[dict] = []
    for variant in args.variants.split(";"):
        cmd = [
            sys.executable, "-m", "bench.vllm_overhead", "--worker", variant,
            "--model", args.model, "--batches", ",".join(map(str, args.batches)),
            "--max-tokens", str(args.max_tokens), "--repeats", str(args.repeats),
            "--dtype", args.dtype, "--gpu-memory-utilization", str(args.gpu_memory_utilization),
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate()
        for line in out.splitlines():
            if line.startswith("ROW "):
                rows.append(json.loads(line[4:]))
                print(line, flush=True)
        if proc.returncode != 0:
            print(f"\n{variant}: exited {proc.returncode}\n" + "\n".join(err.splitlines()[-15:]))
    report(rows, args)


def report(rows: list[dict], args: argparse.Namespace) -> None:
    print(
        f"\n## rft's vllm engine against LLM.generate, {args.model}, {args.dtype}, T=1.0, up to "
        f"{args.max_tokens} new tokens, median of {args.repeats} alternated rounds\n"
    )
    print(
        "| settings | prompts | rft tok/s | LLM.generate tok/s | rft overhead | paired overhead "
        "(min-max) | rft convert | no-logprobs tok/s | logprobs cost vLLM |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["kind"] != "throughput":
            continue
        ours, ceiling, bare = r["rft"], r["LLM.generate"], r["no logprobs"]
        low, high = r["spread"]["rft"]
        low_c, high_c = r["spread"]["LLM.generate"]
        print(
            f"| {r['variant'] or 'rft defaults'} | {r['batch']} | "
            f"{ours:,.0f} ({low / 1e3:.1f}k-{high / 1e3:.1f}k) | "
            f"{ceiling:,.0f} ({low_c / 1e3:.1f}k-{high_c / 1e3:.1f}k) | "
            f"{1 - ours / ceiling:+.1%} | {r['paired_overhead']:+.1%} "
            f"({r['paired_spread'][0]:+.1%} to {r['paired_spread'][1]:+.1%}) | "
            f"{r['convert_share']:.1%} | {bare:,.0f} | "
            f"{1 - ceiling / bare:+.1%} |"
        )
    starts = [r for r in rows if r["kind"] == "start"]
    print(
        "\nengine start: "
        + ", ".join(f"{r['variant'] or 'defaults'} {r['seconds']:.0f} s" for r in starts)
    )


if __name__ == "__main__":
    main()
