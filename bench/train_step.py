"""Train-step benchmark: time and memory of one optimizer step of the torch trainer engine.

Default: SmolLM2-135M, 64 sequences of ~80 tokens (30 prompt + 50 response), micro-batch 16,
a clipped policy-gradient loss. Prints a table per step.
On a GPU (--device cuda) untimed warm-up steps run first, clocks are read after
torch.cuda.synchronize(), and the median step time and peak GPU memory are printed last.
Run: python bench/train_step.py [--model smollm2] [--sequences 64] [--micro-batch 16]
     [--device cuda --dtype bfloat16 --steps 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import numpy as np
import torch

from rft.algorithms.objective import LossBatch
from rft.engines.models import ModelSpec, load_model
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine, TrainBatch


def clipped_pg_loss(logprob, entropy, batch: LossBatch):
    """Token-mean PPO clip loss, eps 0.2."""
    mask = batch.action_mask
    ratio = torch.exp(logprob - batch.old_logprob)
    adv = batch.advantages
    per_token = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    loss = (per_token * mask).sum() / mask.sum()
    return loss, {"entropy": (entropy.detach() * mask).sum() / mask.sum()}


def synthetic_batch(
    rows: int, prompt_len: int, response_len: int, vocab: int, seed: int = 0
) -> TrainBatch:
    rng = np.random.default_rng(seed)
    responses = [rng.integers(3, vocab, response_len).tolist() for _ in range(rows)]
    return TrainBatch(
        prompt_ids=[rng.integers(3, vocab, prompt_len).tolist() for _ in range(rows)],
        response_ids=responses,
        old_logprobs=[(-rng.random(response_len) * 5).tolist() for _ in range(rows)],
        action_mask=[[1] * response_len for _ in range(rows)],
        advantages=torch.tensor(rng.normal(size=rows), dtype=torch.float32),
    )


def sync(device: str) -> None:
    """Wait for queued GPU work, so a host clock read after it covers that work."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--warmup", type=int, default=None, help="untimed steps first (cuda: 1, cpu: 0)"
    )
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=30)
    parser.add_argument("--response-len", type=int, default=50)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--ref-model", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    gpu = args.device.startswith("cuda")
    warmup = args.warmup if args.warmup is not None else (1 if gpu else 0)

    start = time.perf_counter()
    model, tok = load_model(ModelSpec(args.model, dtype=args.dtype, device=args.device))
    sync(args.device)
    print(f"# train-step bench: model={args.model} threads={args.threads}", end="")
    print(f" device={args.device} dtype={args.dtype}" if gpu or args.dtype != "float32" else "")
    if gpu:
        print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"model load: {time.perf_counter() - start:.1f} s")
    config = TorchTrainerConfig(
        lr=1e-6, micro_batch_size=args.micro_batch, use_ref_model=args.ref_model
    )
    engine = TorchTrainerEngine(model, config, tokenizer=tok)
    batch = synthetic_batch(
        args.sequences, args.prompt_len, args.response_len, model.config.vocab_size
    )
    print(
        f"\n{args.sequences} sequences x {args.prompt_len}+{args.response_len} tokens, "
        f"micro-batch {args.micro_batch}, ref model: {args.ref_model}"
        + (f", {warmup} untimed warm-up step(s)" if warmup else "")
        + "\n"
    )
    for _ in range(warmup):
        engine.train_step(batch, clipped_pg_loss)
    sync(args.device)
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    print("| step | seconds | tokens/s | loss | grad_norm | peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    tokens = args.sequences * (args.prompt_len + args.response_len)
    times: list[float] = []
    for step in range(args.steps):
        sync(args.device)
        start = time.perf_counter()
        metrics = engine.train_step(batch, clipped_pg_loss)
        sync(args.device)
        took = time.perf_counter() - start
        times.append(took)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"| {step} | {took:.{3 if gpu else 1}f} | {tokens / took:.0f} | {metrics['loss']:.4f} "
            f"| {metrics['grad_norm']:.3f} | {rss:.0f} |"
        )

    if gpu:
        median = statistics.median(times)
        print(f"\nmedian step: {median:.3f} s ({tokens / median:.0f} tokens/s)")
        print(
            f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB allocated, "
            f"{torch.cuda.max_memory_reserved() / 2**30:.2f} GiB reserved"
        )


if __name__ == "__main__":
    main()
