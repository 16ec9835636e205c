"""FSDP2 trainer-engine benchmark: step time and peak memory per rank at 1 vs N ranks.

The model is randomly initialised in code with a published architecture's shape (no download):
`qwen2.5-1.5b` (Qwen2.5-1.5B: 28 layers, hidden 1536, vocab 151936, tied embeddings) or `tiny`.
Weights and AdamW stay float32 (the trainer's master copy); with --bf16 the forward runs in bf16
(FSDP's mixed-precision policy), as `model.dtype: auto` does on GPUs. Random tokens, random
advantages, a token-mean policy-gradient loss: a throughput measurement, no learning claim.
Run (GPUs): python -m bench.fsdp_step --ranks 2 --device cuda --bf16
Run (CPU):  python -m bench.fsdp_step --ranks 2 --model tiny --sequences 8 --prompt 16 --response 16
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from typing import Any

import numpy as np
import torch

from rft.algorithms.objective import LossBatch
from rft.engines.trainer import TRAINER_ENGINES, TorchTrainerConfig, TrainBatch, TrainerPlacement

SHAPES = {
    "qwen2.5-1.5b": {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 259,
        "tie_word_embeddings": True,
    },
}


class PolicyGradientLoss:
    """Token-mean of -advantage * logprob over action tokens (pickled to every rank by name)."""

    def __call__(self, logprob, entropy, batch: LossBatch):  # type: ignore[no-untyped-def]
        mask = batch.action_mask
        loss = -(batch.advantages * logprob * mask).sum() / mask.sum()
        return loss, {}


def random_model(shape: dict[str, Any], device: str) -> Any:
    """A Qwen2 causal LM of `shape`, randomly initialised on `device` with seed 0 (the caller's
    RNG untouched): the same weights in every process and checkout."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(0)
        return Qwen2ForCausalLM(Qwen2Config(**shape))


def random_batch(rows: int, prompt: int, response: int, vocab: int, seed: int) -> TrainBatch:
    rng = np.random.default_rng(seed)
    return TrainBatch(
        prompt_ids=[rng.integers(1, vocab, prompt).tolist() for _ in range(rows)],
        response_ids=[rng.integers(1, vocab, response).tolist() for _ in range(rows)],
        old_logprobs=[[0.0] * response for _ in range(rows)],
        action_mask=[[1] * response for _ in range(rows)],
        advantages=torch.tensor(rng.normal(size=rows), dtype=torch.float32),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--model", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--sequences", type=int, default=32)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--response", type=int, default=768)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()

    devices = tuple(f"cuda:{r}" if args.device == "cuda" else "cpu" for r in range(args.ranks))
    shape = SHAPES[args.model]
    model = random_model(shape, devices[0])
    config = TorchTrainerConfig(
        lr=1e-6,
        micro_batch_size=args.micro_batch,
        autocast_dtype="bfloat16" if args.bf16 else None,
    )
    # the loss must pickle by an importable name, not as __main__'s
    loss = importlib.import_module("bench.fsdp_step").PolicyGradientLoss()
    params = sum(p.numel() for p in model.parameters())
    engine = TRAINER_ENGINES.get("fsdp2")(model, None, config, TrainerPlacement(devices))
    del model
    times = []
    with engine:
        engine.peak_memory()  # reset after the setup
        for step in range(args.warmup + args.steps):
            batch = random_batch(
                args.sequences, args.prompt, args.response, shape["vocab_size"], seed=step
            )
            started = time.perf_counter()
            metrics = engine.train_step(batch, loss)
            elapsed = time.perf_counter() - started
            if step >= args.warmup:
                times.append(elapsed)
            print(f"step {step}: {elapsed:.3f}s loss {metrics['loss']:.4f}", flush=True)
        peaks = engine.peak_memory()
    tokens = args.sequences * (args.prompt + args.response)
    median = statistics.median(times)
    print(
        f"\n| model | params | ranks | devices | compute | sequences x tokens | micro-batch "
        f"| step time (median of {args.steps}) | tokens/s | peak memory per rank |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.model} (random init) | {params / 1e9:.2f}B | {args.ranks} | {args.device} "
        f"| {'bf16' if args.bf16 else 'fp32'} | {args.sequences} x {args.prompt + args.response} "
        f"| {args.micro_batch} | {median:.3f} s | {tokens / median:,.0f} "
        f"| {', '.join(f'{p / 2**30:.1f} GiB' for p in peaks)} |"
    )


if __name__ == "__main__":
    main()
