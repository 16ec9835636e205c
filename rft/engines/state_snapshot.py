"""Copies of a trainer's tensors on the CPU that the next optimizer step cannot change.

A version's weights go up, and its training state (AdamW moments, master weights) is serialized
and written, in the background while the trainer goes on stepping, so what is written must be a
copy taken at the version. Serializing straight from the live tensors on the step's path cost a
1.5B-parameter trainer 30 s per state-carrying version on an H100 (docs/benchmarks.md); taking
the copy costs one device-to-host transfer. Tensors on a GPU are copied with non-blocking
transfers (torch places their destinations in pinned memory, which its host allocator keeps for
the next version) and one synchronize per device; tensors already on the CPU are cloned, since
they may be the live state itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def cpu_snapshot(state: Any) -> Any:
    """`state` (nested dicts, lists and tuples of tensors and plain values) with every tensor
    replaced by a CPU copy of its own; plain values are shared (they are immutable or rebuilt
    by the next step)."""
    devices: set[torch.device] = set()
    copied = _copy(state, devices)
    for device in devices:
        torch.cuda.synchronize(device)
    return copied


def _copy(value: Any, devices: set[torch.device]) -> Any:
    if isinstance(value, torch.Tensor):
        if value.device.type == "cpu":
            return value.detach().clone()
        if value.device.type == "cuda":
            devices.add(value.device)
        return value.detach().to("cpu", non_blocking=value.device.type == "cuda")
    if isinstance(value, dict):
        return {key: _copy(item, devices) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item, devices) for item in value]
    if isinstance(value, tuple):
        return tuple(_copy(item, devices) for item in value)
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
        out[name] = value if on_cpu and (cast or not owned) else _copy(value, devices)
    for device in devices:
        torch.cuda.synchronize(device)
    return out
