"""How busy the GPU is during one trainer step: kernel time against the step's wall time.

A step whose GPU is busy for most of its wall time is bound by the GPU; one whose GPU is idle for
much of it is bound by the host (launching kernels, Python, waits on the host between kernels),
and then anything that slows the host's cores slows the step. The bench builds the engine as
bench.step_beside_upload does (random weights in a published model's shape: throughput only),
times --steps steps unprofiled (wall, the step thread's CPU and the process's: backward runs on
autograd's own thread for a CUDA device, so the thread's CPU leaves it out), then profiles one
with torch.profiler.

The GPU's time is read from the profile's device events only (kernels, copies, memsets), in two
ways: their durations added up (streams that overlap count twice) and the time at least one of
them ran (the union of their intervals: what "busy" means). The host's work shows as CPU events
too, and each kernel is also attached to the CPU event that launched it, so adding up every
event's GPU self time counts most kernels twice: this bench did that before 2026-11-28, and its
first two runs' "GPU kernel + copy time" (6.70 s and 6.76 s) were about twice the kernels' time.
The largest kernels and the CUDA runtime's copying and synchronizing calls are listed as well: at
each synchronizing call the host waits for the GPU, and the GPU then waits for the host's next
launches.

Run (GPU): python -m bench.step_gpu_busy --engine fsdp2 --bf16
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterable
from typing import Any

import torch
from torch.autograd import DeviceType

from bench.fsdp_step import PolicyGradientLoss, random_batch
from bench.step_beside_upload import add_step_args, engine_for


def device_events(events: Iterable[Any]) -> list[Any]:
    """The profile's events that ran on a device (kernels, copies, memsets), not the host's."""
    return [e for e in events if e.device_type != DeviceType.CPU]


def busy_seconds(events: Iterable[Any]) -> float:
    """The time at least one of `events` was running: the union of their intervals."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    busy_us, reach = 0.0, float("-inf")
    for start, end in spans:
        if end > reach:
            busy_us += end - max(start, reach)
            reach = end
    return busy_us / 1e6


def largest_kernels(events: Iterable[Any], count: int) -> list[tuple[str, int, float]]:
    """(name, calls, seconds) of the `count` device event names with the most time in all."""
    totals: dict[str, list[float]] = {}
    for event in events:
        entry = totals.setdefault(event.name, [0, 0.0])
        entry[0] += 1
        entry[1] += (event.time_range.end - event.time_range.start) / 1e6
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][1])[:count]
    return [(name, int(calls), seconds) for name, (calls, seconds) in ranked]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_args(parser)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=15, help="GPU time's largest entries shown")
    args = parser.parse_args()
    engine, shape = engine_for(args)
    loss = PolicyGradientLoss()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    walls, cpus, process_cpus = [], [], []
    try:
        for step in range(args.steps + 1):  # the first warms up
            batch = random_batch(
                args.sequences, args.prompt, args.response, shape["vocab_size"], step
            )
            started, cpu = time.perf_counter(), time.thread_time()
            process_cpu = time.process_time()
            engine.train_step(batch, loss)
            sync()
            if step:
                walls.append(time.perf_counter() - started)
                cpus.append(time.thread_time() - cpu)
                process_cpus.append(time.process_time() - process_cpu)
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
    on_device = device_events(prof.events())
    kernel_s = sum(e.time_range.end - e.time_range.start for e in on_device) / 1e6
    busy_s = busy_seconds(on_device)
    syncs: dict[str, int] = {}
    for event in prof.key_averages():
        name = event.key
        if name.startswith("cuda") and ("Synchronize" in name or "Memcpy" in name):
            syncs[name] = syncs.get(name, 0) + event.count
    wall = statistics.median(walls)
    print(
        f"\n{args.engine} engine, {args.model} shape (random weights), bf16={args.bf16}, "
        f"gradient checkpointing={args.grad_ckpt}, {args.sequences} x ({args.prompt} + "
        f"{args.response}) tokens, micro-batch {args.micro_batch}"
    )
    print(
        "\n| step wall (median) | step thread CPU | process CPU | profiled step's wall "
        "| its kernels + copies, added up | GPU busy (any of them running) | busy / profiled wall |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {wall:.2f} s | {statistics.median(cpus):.2f} s | "
        f"{statistics.median(process_cpus):.2f} s | {profiled_wall:.2f} s | {kernel_s:.2f} s | "
        f"{busy_s:.2f} s | {busy_s / profiled_wall:.0%} |"
    )
    print(f"\nThe {args.top} kernels and copies with the most GPU time in the profiled step:")
    print("\n| kernel or copy | calls | GPU time | share of the profiled step's wall |")
    print("|---|---|---|---|")
    for name, calls, seconds in largest_kernels(on_device, args.top):
        print(f"| {name[:90]} | {calls} | {seconds:.3f} s | {seconds / profiled_wall:.1%} |")
    print("\nCUDA runtime calls that copy or synchronize (profiled step):")
    for name, count in sorted(syncs.items(), key=lambda kv: -kv[1]):
        print(f"  {name}: {count}")


if __name__ == "__main__":
    main()
