"""How busy the GPU is during one trainer step: kernel time against the step's wall time.

A step whose GPU time is close to its wall time keeps the GPU busy; one with much less is bound
by the host (launching kernels, Python, waits on the host between kernels), and then anything that
slows the host's cores slows the step. The sum can pass the wall time: FSDP2's copies run on
streams of their own, beside the compute. The host's synchronizing calls are counted too: at each
one the host waits for the GPU, and the GPU then waits for the host's next launches. The bench builds the engine as bench.step_beside_upload
does (random weights in a published model's shape: throughput only), times --steps steps
unprofiled, then profiles one with torch.profiler: its GPU kernel and copy time in all, the
kernels and copies that took most of it, and the CUDA runtime's copying and synchronizing calls
the host made.

Run (GPU): python -m bench.step_gpu_busy --engine fsdp2 --bf16
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from bench.fsdp_step import PolicyGradientLoss, random_batch
from bench.step_beside_upload import add_step_args, engine_for


def top_device_events(events: Any, count: int) -> list[Any]:
    """The `count` profiler entries with the most GPU self time, largest first."""
    timed = [e for e in events if e.self_device_time_total > 0]
    return sorted(timed, key=lambda e: -e.self_device_time_total)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_args(parser)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=15, help="GPU time's largest entries shown")
    args = parser.parse_args()
    engine, shape = engine_for(args)
    loss = PolicyGradientLoss()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    walls, cpus = [], []
    try:
        for step in range(args.steps + 1):  # the first warms up
            batch = random_batch(
                args.sequences, args.prompt, args.response, shape["vocab_size"], step
            )
            started, cpu = time.perf_counter(), time.thread_time()
            engine.train_step(batch, loss)
            sync()
            if step:
                walls.append(time.perf_counter() - started)
                cpus.append(time.thread_time() - cpu)
            print(f"ROW step={step} wall_s={time.perf_counter() - started:.3f}", flush=True)
        batch = random_batch(args.sequences, args.prompt, args.response, shape["vocab_size"], 99)
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as prof:
            started = time.perf_counter()
            engine.train_step(batch, loss)
            sync()
            profiled_wall = time.perf_counter() - started
    finally:
        engine.close()
    gpu_us = 0.0
    syncs: dict[str, int] = {}
    for event in prof.key_averages():
        gpu_us += event.self_device_time_total
        name = event.key
        if name.startswith("cuda") and ("Synchronize" in name or "Memcpy" in name):
            syncs[name] = syncs.get(name, 0) + event.count
    wall = statistics.median(walls)
    gpu_s = gpu_us / 1e6
    print(
        f"\n{args.engine} engine, {args.model} shape (random weights), bf16={args.bf16}, "
        f"gradient checkpointing={args.grad_ckpt}, {args.sequences} x ({args.prompt} + "
        f"{args.response}) tokens, micro-batch {args.micro_batch}"
    )
    print(
        "\n| step wall (median) | step thread CPU | GPU kernel + copy time (profiled step) "
        "| GPU busy share | profiled step's wall |"
    )
    print("|---|---|---|---|---|")
    print(
        f"| {wall:.2f} s | {statistics.median(cpus):.2f} s | {gpu_s:.2f} s | "
        f"{gpu_s / wall:.0%} | {profiled_wall:.2f} s |"
    )
    print(f"\nThe {args.top} largest GPU time shares of the profiled step (self time):")
    print("\n| kernel or copy | calls | GPU time | share of the step's wall |")
    print("|---|---|---|---|")
    for event in top_device_events(prof.key_averages(), args.top):
        print(
            f"| {event.key[:90]} | {event.count} | {event.self_device_time_total / 1e6:.3f} s | "
            f"{event.self_device_time_total / 1e6 / profiled_wall:.1%} |"
        )
    print("\nCUDA runtime calls that copy or synchronize (profiled step):")
    for name, count in sorted(syncs.items(), key=lambda kv: -kv[1]):
        print(f"  {name}: {count}")


if __name__ == "__main__":
    main()
