"""The host's work in one trainer step, per engine and gradient checkpointing, on the CPU.

At the 1.5B-shape loop's sizes the fsdp2 step on an H100 is bound by its host: the GPU sat idle
about 40% of the step (docs/benchmarks.md, the ninth lease), waiting for Python, torch's
dispatch, FSDP2's hooks and the checkpoint's hooks to launch its next kernels. That host work
depends on how many layers and micro-batches a step has, not on how wide the layers are. This
bench keeps the loop's 28 layers and 16 micro-batches but makes the layers so thin (hidden 64)
and the sequences so short that the arithmetic costs little: on the CPU, with one torch thread,
the step's time is then mostly that host work, and it can be compared between engines and
checkpointing ways on a machine without a GPU.

Each configuration runs in a process of its own (a warm-up step, then --steps timed steps), the
configurations alternated over --rounds rounds; the table gives the medians and each one's
ratio to the torch engine without checkpointing (the least host work of the four).

Run: python -m bench.step_host_work [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

# the loop's depth and micro-batch count; thin and short, so that the host's work dominates
THIN = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 28,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 259,
    "tie_word_embeddings": True,
}
CONFIGS = [("torch", False), ("torch", True), ("fsdp2", False), ("fsdp2", True)]


def one_run(engine_name: str, grad_ckpt: bool, steps: int, micro_batches: int) -> dict:
    """Build the engine in this process, one warm-up step, then `steps` timed ones."""
    import torch

    from bench.fsdp_step import PolicyGradientLoss, random_batch, random_model
    from rft.engines.trainer import TRAINER_ENGINES, TorchTrainerConfig, TrainerPlacement

    torch.set_num_threads(1)
    config = TorchTrainerConfig(lr=1e-6, micro_batch_size=2, gradient_checkpointing=grad_ckpt)
    model = random_model(THIN, "cpu")
    engine = TRAINER_ENGINES.get(engine_name)(model, None, config, TrainerPlacement(("cpu",)))
    loss = PolicyGradientLoss()
    walls = []
    try:
        for step in range(steps + 1):
            batch = random_batch(2 * micro_batches, 4, 12, THIN["vocab_size"], step)
            started = time.perf_counter()
            engine.train_step(batch, loss)
            if step:
                walls.append(time.perf_counter() - started)
    finally:
        engine.close()
    return {"step_s": statistics.median(walls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per run")
    parser.add_argument("--micro-batches", type=int, default=16)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # "engine:ckpt": run one, print JSON
    args = parser.parse_args()
    if args.one:
        engine_name, ckpt = args.one.split(":")
        print(json.dumps(one_run(engine_name, ckpt == "1", args.steps, args.micro_batches)))
        return
    results: dict[tuple[str, bool], list[float]] = {c: [] for c in CONFIGS}
    for round_no in range(args.rounds):
        for engine_name, ckpt in CONFIGS:
            cmd = [
                sys.executable, "-m", "bench.step_host_work", "--one",
                f"{engine_name}:{int(ckpt)}", "--steps", str(args.steps),
                "--micro-batches", str(args.micro_batches),
            ]  # fmt: skip
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            step_s = json.loads(out.strip().splitlines()[-1])["step_s"]
            results[(engine_name, ckpt)].append(step_s)
            print(f"ROW round={round_no} engine={engine_name} ckpt={ckpt} step_s={step_s:.3f}")
    floor = statistics.median(results[("torch", False)])
    print(
        f"\n28 layers of hidden 64, {args.micro_batches} micro-batches of 2 x 16 tokens, one "
        f"torch thread on the CPU; medians of {args.rounds} runs of {args.steps} steps each"
    )
    print("\n| engine | gradient checkpointing | step (mostly host work) | / torch, none |")
    print("|---|---|---|---|")
    for engine_name, ckpt in CONFIGS:
        median = statistics.median(results[(engine_name, ckpt)])
        print(
            f"| {engine_name} | {'on' if ckpt else 'off'} | {median:.3f} s | {median / floor:.2f}x |"
        )


if __name__ == "__main__":
    main()
