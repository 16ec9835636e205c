"""Copies of a trainer's tensors on the CPU that the next optimizer step cannot change.

A version's weights go up, and its training state (AdamW moments, master weights) is serialized
and written, in the background while the trainer goes on stepping, so what is written must be a
copy taken at the version. Serializing straight from the live tensors on the step's path cost a
1.5B-parameter trainer 30 s per state-carrying version on an H100 (docs/benchmarks.md); taking
the copy costs one device-to-host transfer. Tensors on a GPU are copied with non-blocking
transfers (torch places their destinations in pinned memory, which its host allocator keeps for
the next version) and one synchronize per device; tensors already on the CPU are cloned, since
they may be the live state itself.

The first copy of a large state also allocates its pinned memory: about 10 s for the 16.6 GB of
a 1.5B-parameter model's moments and master weights on an H200, against 0.3 s for every later
copy, which reuses torch's cached blocks (bench/pinned_host.py). `reserve_pinned` allocates those
blocks on a thread of its own before they are needed, while a trainer waits for its first batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

log = logging.getLogger(__name__)


def cpu_snapshot(state: Any) -> Any:
    """`state` (nested dicts, lists and tuples of tensors and plain values) with every tensor
    replaced by a CPU copy of its own; plain values are shared (they are immutable or rebuilt
    by the next step)."""
    devices: set[torch.device] = set()
    copied = map_tensors(state, lambda tensor: copy_to_host(tensor, devices))
    for device in devices:
        torch.cuda.synchronize(device)
    return copied


def copy_to_host(tensor: torch.Tensor, devices: set[torch.device]) -> torch.Tensor:
    """A CPU copy of `tensor` of its own: a clone of a CPU tensor (it may be live state), a
    non-blocking transfer into pinned memory from a GPU, whose device is added to `devices`
    (the caller synchronizes each once, after queueing all its copies)."""
    if tensor.device.type == "cpu":
        return tensor.detach().clone()
    if tensor.device.type == "cuda":
        devices.add(tensor.device)
    return tensor.detach().to("cpu", non_blocking=tensor.device.type == "cuda")


def map_tensors(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """`value` (nested dicts, lists and tuples) with `fn` applied to every tensor, in the order
    the structure is walked (the same on every rank of a collective); other values as they are."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {key: map_tensors(item, fn) for key, item in value.items()}
    if isinstance(value, list):
        return [map_tensors(item, fn) for item in value]
    if isinstance(value, tuple):
        return tuple(map_tensors(item, fn) for item in value)
    return value


def host_tensors(
    tensors: Mapping[str, torch.Tensor], dtype: torch.dtype | None, *, owned: bool
) -> dict[str, torch.Tensor]:
    """`tensors` on the CPU, in `dtype` (None: each its own). A tensor on a GPU is cast there
    (bf16 from float32 moves half the bytes) and moved like `cpu_snapshot`'s: non-blocking
    into pinned memory, one synchronize per device, which at 1.5B parameters is what keeps
    taking a version off the step's path. A CPU tensor is returned as it is unless `owned` asks
    for a copy of its own (a cast is one already)."""
    devices: set[torch.device] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        value = tensor.detach()
        cast = dtype is not None and value.dtype != dtype
        if cast:
            value = value.to(dtype)
        on_cpu = value.device.type == "cpu"
        # the copy cpu_snapshot makes, except of a CPU tensor that is fresh or may be borrowed
        out[name] = value if on_cpu and (cast or not owned) else copy_to_host(value, devices)
    for device in devices:
        torch.cuda.synchronize(device)
    return out


def adamw_moment_sizes(params: Sequence[torch.Tensor]) -> list[int]:
    """The bytes of each tensor a copy of AdamW's state over `params` holds: both moments of
    every parameter (`exp_avg`, `exp_avg_sq`: the parameter's dtype and shape)."""
    return [p.numel() * p.element_size() for p in params] * 2


def version_copy_sizes(
    params: Sequence[torch.Tensor], export_dtype: torch.dtype | None, with_master: bool
) -> list[int]:
    """The bytes of each host tensor a version's copies hold for `params`, taken together when
    the version carries the training state: the exported weights (each parameter in
    `export_dtype`; None: its own), AdamW's moments, and with `with_master` each parameter once
    more in its own dtype (the float32 master weights of a version published rounded)."""
    own = [p.numel() * p.element_size() for p in params]
    width = None if export_dtype is None else torch.empty((), dtype=export_dtype).element_size()
    export = own if width is None else [p.numel() * width for p in params]
    return export + adamw_moment_sizes(params) + (own if with_master else [])


def reserve_pinned(sizes: Sequence[int]) -> threading.Thread:
    """Start allocating pinned host blocks of `sizes` bytes, all at once, then freeing them, on a
    daemon thread; the thread, already started. torch's caching host allocator keeps a freed block
    and hands it to the next pinned request of its size, so the copies above that later ask for
    these sizes find their memory waiting. A failure (no CUDA after all, the host's limit on
    locked memory) is logged: the copies then allocate as they would have."""

    def reserve() -> None:
        try:
            held = [torch.empty(size, dtype=torch.uint8, pin_memory=True) for size in sizes]
        except RuntimeError as exc:
            log.warning("could not set aside pinned host memory for state copies: %s", exc)
            return
        log.info("set aside %.1f GB of pinned host memory for state copies", sum(sizes) / 1e9)
        del held

    thread = threading.Thread(target=reserve, name="pinned-reserve", daemon=True)
    thread.start()
    return thread
