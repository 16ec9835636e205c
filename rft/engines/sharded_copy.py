"""Full host copies of sharded (DTensor) state, gathered one tensor at a time, kept on rank 0.

The fsdp2 engine's weights and AdamW state live as shards (DTensors) on every rank; a version
needs them whole on rank 0's host. torch's `get_model_state_dict` / `get_optimizer_state_dict`
with `full_state_dict=True, cpu_offload=True` do that with a blocking copy of each tensor into
ordinary (pageable) host memory, fresh every time, so each take pays for new pages and a staged
copy, and a weights export rounded to bf16 crosses PCIe in float32 and is cast on the CPU.

Here every rank gathers each DTensor on its device (`full_tensor`, a collective: all ranks walk
the same state in the same order), casts it there when asked, and rank 0 moves it like
`cpu_snapshot`'s copies: non-blocking into pinned memory that torch's host allocator keeps for
the next version (and that `reserve_pinned` can set aside before the first), with one
synchronize at the end. The device holds one gathered tensor at a time: a gathered tensor is
freed as soon as its copy is queued, and the allocator reuses its memory only after the copy
ran (both are on the current stream).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor

from rft.engines.state_snapshot import copy_to_host, map_tensors


def gather_to_host(state: Any, *, keep: bool, dtype: torch.dtype | None = None) -> Any:
    """`state` (nested dicts, lists and tuples of tensors, DTensors and plain values) with every
    tensor whole and on the CPU, in a copy of its own; floating-point tensors in `dtype` when
    given. Every rank of the DTensors' mesh must call it with the same structure; only a rank
    with `keep` (rank 0) gets the copy, the others None."""
    devices: set[torch.device] = set()

    def gather(value: torch.Tensor) -> torch.Tensor | None:
        tensor = value.detach()
        if isinstance(tensor, DTensor):
            tensor = tensor.full_tensor()
        if not keep:
            return None
        if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
            tensor = tensor.to(dtype)  # on the device: a rounded export moves fewer bytes
        return copy_to_host(tensor, devices)

    out = map_tensors(state, gather)
    for device in devices:
        torch.cuda.synchronize(device)
    return out if keep else None
