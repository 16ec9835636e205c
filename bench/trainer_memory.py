"""Trainer memory benchmark: peak memory and step time of one optimizer step per memory setting.

Settings (each in a fresh child process, so peaks do not leak from one into the next):
`base` (micro_batch_size rows per micro-batch), `grad_ckpt` (enable_gradient_checkpointing),
`dynamic_bsz` (use_dynamic_bsz with --token-budget padded tokens per micro-batch),
`optimizer_offload`, `fsdp2` (1 rank, the baseline of the next), `fsdp2_param_offload`
(param_offload + optimizer_offload) and `lora` (a rank-16 adapter on every linear layer).

The model is randomly initialised with a published architecture's shape (bench.fsdp_step's
SHAPES: `qwen2.5-1.5b` or `tiny`; or `small`, below), weights and AdamW in float32; prompts of --prompt tokens and
responses of 1..--response tokens (random lengths, so a token budget packs differently than a
row count); a token-mean policy-gradient loss. A throughput and memory measurement: no learning
claim. Peak memory: torch.cuda.max_memory_allocated on a GPU (--device cuda), the process's peak
resident set on the CPU (which includes the Python and torch runtime, the same in every row).

Run (GPU): python -m bench.trainer_memory --device cuda --bf16
Run (CPU): python -m bench.trainer_memory --device cpu --model small --sequences 16 --prompt 128 --response 256
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np
import torch

# a shape between bench.fsdp_step's tiny and 1.5B ones, whose activations outweigh the runtime
# on a CPU: 8 layers, hidden 256, vocab 8192 (about 10M parameters)
LOCAL_SHAPES = {
    "small": {
        "hidden_size": 256,
        "intermediate_size": 1024,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "vocab_size": 8192,
        "tie_word_embeddings": True,
    },
}

SETTINGS = (
    "base",
    "grad_ckpt",
    "dynamic_bsz",
    "optimizer_offload",
    "fsdp2",
    "fsdp2_param_offload",
    "lora",
)


def varied_batch(rows: int, prompt: int, response: int, vocab: int, seed: int) -> Any:
    from rft.engines.trainer import TrainBatch

    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, response + 1, rows)
    return TrainBatch(
        prompt_ids=[rng.integers(1, vocab, prompt).tolist() for _ in range(rows)],
        response_ids=[rng.integers(1, vocab, int(n)).tolist() for n in lengths],
        old_logprobs=[[0.0] * int(n) for n in lengths],
        action_mask=[[1] * int(n) for n in lengths],
        advantages=torch.tensor(rng.normal(size=rows), dtype=torch.float32),
    )


def engine_for(setting: str, args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The trainer engine of `setting` on a freshly initialised model, and the model's shape."""
    from bench.fsdp_step import SHAPES, random_model
    from rft.engines.lora import LoraSpec
    from rft.engines.trainer import TRAINER_ENGINES, TorchTrainerConfig, TrainerPlacement

    shape = {**SHAPES, **LOCAL_SHAPES}[args.model]
    device = "cuda:0" if args.device == "cuda" else "cpu"
    model = random_model(shape, device)
    config = TorchTrainerConfig(
        lr=1e-6,
        micro_batch_size=args.micro_batch,
        autocast_dtype="bfloat16" if args.bf16 else None,
    )
    changes: dict[str, dict[str, Any]] = {
        "base": {},
        "grad_ckpt": {"gradient_checkpointing": True},
        "dynamic_bsz": {"max_tokens_per_micro_batch": args.token_budget},
        "optimizer_offload": {"optimizer_offload": True},
        "fsdp2": {},
        "fsdp2_param_offload": {"param_offload": True, "optimizer_offload": True},
        "lora": {"lora": LoraSpec(rank=16, alpha=32)},
    }
    config = dataclasses.replace(config, **changes[setting])
    name = "fsdp2" if setting.startswith("fsdp2") else "torch"
    return TRAINER_ENGINES.get(name)(model, None, config, TrainerPlacement((device,))), shape


def run_one(setting: str, args: argparse.Namespace) -> dict[str, Any]:
    """One setting's steps in this process: its median step time and peak memory."""
    loss = __import__("bench.fsdp_step", fromlist=["PolicyGradientLoss"]).PolicyGradientLoss()
    engine, shape = engine_for(setting, args)
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    try:
        for step in range(args.warmup + args.steps):
            batch = varied_batch(
                args.sequences, args.prompt, args.response, shape["vocab_size"], seed=step
            )
            started = time.perf_counter()
            engine.train_step(batch, loss)
            if cuda:
                torch.cuda.synchronize()
            if step >= args.warmup:
                times.append(time.perf_counter() - started)
        peak = (
            torch.cuda.max_memory_allocated()
            if cuda
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        )
    finally:
        engine.close()
    return {"setting": setting, "step_s": statistics.median(times), "peak_bytes": int(peak)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-1.5b")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--sequences", type=int, default=32)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--response", type=int, default=768)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--token-budget", type=int, default=None)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--one", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.token_budget is None:  # half the padded size of a full row-count micro-batch
        args.token_budget = args.micro_batch * (args.prompt + args.response) // 2
    if args.one:
        print(json.dumps(run_one(args.one, args)), flush=True)
        return
    rows = []
    for setting in args.settings.split(","):
        argv = [sys.executable, "-m", "bench.trainer_memory", *sys.argv[1:], "--one", setting]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{setting}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{setting}: done", file=sys.stderr, flush=True)
    what = "peak GPU memory (max allocated)" if args.device == "cuda" else "peak RSS"
    print(
        f"\n{args.model} (random init), {args.device}, {'bf16' if args.bf16 else 'fp32'} "
        f"compute; {args.sequences} sequences of {args.prompt} + 1..{args.response} tokens; "
        f"micro_batch_size {args.micro_batch}, token budget {args.token_budget}; median of "
        f"{args.steps} steps after {args.warmup}"
    )
    print(f"\n| setting | step time | {what} |")
    print("|---|---|---|")
    for row in rows:
        print(
            f"| {row['setting']} | {row['step_s']:.3f} s | {row['peak_bytes'] / 2**20:,.0f} MiB |"
        )


if __name__ == "__main__":
    main()
