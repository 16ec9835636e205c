"""bench/step_gpu_busy.py's reading of a profile: only device events count as GPU time, their
union is the time the GPU was busy, and the largest kernels are ranked by their own durations.

The events are torch's own `FunctionEvent`s, built as torch.profiler builds them from a CUDA
trace: a kernel is an event of its own and is also attached (`append_kernel`) to the host event
that launched it. That attachment is why adding up every event's GPU self time counts a kernel
twice, which the first version of the bench did.
"""

from __future__ import annotations

import random

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

from bench.step_gpu_busy import busy_seconds, device_events, largest_kernels


def kernel(n: int, name: str, start_us: float, end_us: float) -> FunctionEvent:
    return FunctionEvent(
        n, name, thread=0, start_us=start_us, end_us=end_us, use_device="cuda",
        device_type=DeviceType.CUDA,
    )  # fmt: skip


def launch(n: int, name: str, start_us: float, end_us: float, *kernels: FunctionEvent):
    host = FunctionEvent(n, name, thread=1, start_us=start_us, end_us=end_us, use_device="cuda")
    for k in kernels:
        host.append_kernel(k.name, 0, k.time_range.end - k.time_range.start)
    return host


def test_a_kernel_counts_once_though_its_launch_carries_it_too() -> None:
    mm = kernel(1, "gemm", 100.0, 400.0)
    copy = kernel(2, "Memcpy DtoD", 500.0, 600.0)
    events = [launch(10, "aten::mm", 0.0, 50.0, mm), launch(11, "aten::copy_", 60.0, 70.0, copy)]
    events += [mm, copy]
    # what the bench added up before: each kernel's time twice
    assert sum(e.self_device_time_total for e in events) == pytest.approx(2 * 400.0)
    on_device = device_events(events)
    assert sorted(e.name for e in on_device) == ["Memcpy DtoD", "gemm"]
    assert sum(e.time_range.end - e.time_range.start for e in on_device) == pytest.approx(400.0)


def test_busy_time_is_the_union_of_overlapping_streams() -> None:
    events = [
        kernel(1, "a", 0.0, 100.0),
        kernel(2, "copy", 50.0, 150.0),  # another stream, overlapping `a`
        kernel(3, "b", 120.0, 130.0),  # inside `copy`
        kernel(4, "c", 300.0, 310.0),  # after a gap
    ]
    assert busy_seconds(events) == pytest.approx(160.0 / 1e6)
    assert busy_seconds([]) == 0.0


def test_busy_time_matches_a_brute_force_count_of_busy_microseconds() -> None:
    rng = random.Random(7)
    events = []
    for n in range(200):
        start = rng.randrange(0, 5000)
        events.append(kernel(n, f"k{n % 5}", float(start), float(start + rng.randrange(1, 80))))
    covered = set()
    for e in events:
        covered.update(range(int(e.time_range.start), int(e.time_range.end)))
    assert busy_seconds(events) == pytest.approx(len(covered) / 1e6)
    added = sum(e.time_range.end - e.time_range.start for e in events) / 1e6
    assert busy_seconds(events) <= added


def test_largest_kernels_rank_names_by_their_total_time() -> None:
    events = [
        kernel(1, "small", 0.0, 10.0),
        kernel(2, "many", 10.0, 30.0),
        kernel(3, "many", 30.0, 50.0),
        kernel(4, "one big", 50.0, 85.0),
    ]
    ranked = largest_kernels(events, 2)
    assert [(name, calls) for name, calls, _ in ranked] == [("many", 2), ("one big", 1)]
    assert ranked[0][2] == pytest.approx(40.0 / 1e6)


def test_a_cpu_only_profile_has_no_device_time() -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(64, 64) @ torch.ones(64, 64)
    assert prof.events()  # the host's ops were recorded
    assert device_events(prof.events()) == []
