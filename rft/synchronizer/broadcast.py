"""The `nccl` transport: a version travels as broadcasts from the trainer, tensor by tensor.

Each generation is a process group of its own (not the default one: an FSDP trainer has that)
of the trainer (rank 0) and its members, NCCL between GPUs and gloo on the CPU; the trainer
broadcasts the version's tensors in the layout's order into fresh tensors on each member's
device. A member that died (gloo fails at once) or hangs (the broadcast blocks) fails the whole
generation's broadcast within the timeout: the group's control plane then drops it and the
members join again. NCCL cannot put two ranks on one GPU: trainer and explorer sharing a GPU
need the `memory` transport (rft.synchronizer.shared_memory).
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend

from rft.synchronizer.transport import Generation, Layout, Post


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def settle(device: torch.device) -> None:
    """Until the device has done what was queued (NCCL's wait only orders streams; the engine
    reads received tensors on another stream)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _new_group(store: Any, rank: int, size: int, backend: str, timeout: timedelta) -> Backend:
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, size, options)
    return dist.ProcessGroupGloo(store, rank, size, timeout)


def _broadcast(group: Any, tensor: torch.Tensor, timeout: timedelta) -> None:
    # Any: torch's stubs give Backend no broadcast, which gloo's and NCCL's have
    options = dist.BroadcastOptions()
    options.rootRank = 0
    options.timeout = timeout
    group.broadcast([tensor], options).wait(timeout)


class BroadcastTransport:
    """`sync_method: nccl`."""

    def describe(self, device: torch.device) -> dict[str, Any]:
        return {"backend": backend_for(device)}

    def refuses(self, described: dict[str, Any], device: torch.device) -> str | None:
        if backend_for(device) != described["backend"]:
            return (
                f"the trainer broadcasts over {described['backend']}, which a member on "
                f"{device} cannot receive"
            )
        return None

    def sender(self, generation: Generation) -> _Sender:
        g = generation
        group = _new_group(g.store, 0, 1 + len(g.members), g.described["backend"], g.timeout)
        return _Sender(group, g.members, g.device, g.timeout)

    def receiver(self, generation: Generation, member_id: str) -> _Receiver:
        g = generation
        rank = 1 + g.members.index(member_id)
        group = _new_group(g.store, rank, 1 + len(g.members), g.described["backend"], g.timeout)
        return _Receiver(group, g.device, g.timeout)


class _Sender:
    def __init__(
        self, group: Backend, members: list[str], device: torch.device, timeout: timedelta
    ) -> None:
        self.group, self.members, self.device, self.timeout = group, members, device, timeout

    def deliver(self, post: Post, tensors: dict[str, torch.Tensor], layout: Layout) -> list[str]:
        post({})  # the members enter the broadcasts when they read it
        for name in layout.names:
            _broadcast(self.group, tensors[name].to(self.device).contiguous(), self.timeout)
        settle(self.device)
        return list(self.members)

    def close(self) -> None:
        # a broken group's members learn it from their own failed broadcast or timeout
        with contextlib.suppress(RuntimeError):
            self.group.abort()  # NCCL: frees a communicator a dead peer left stuck


class _Receiver:
    def __init__(self, group: Backend, device: torch.device, timeout: timedelta) -> None:
        self.group, self.device, self.timeout = group, device, timeout

    def receive(self, body: dict[str, Any], layout: Layout) -> dict[str, torch.Tensor]:
        tensors = layout.empty(self.device)
        for name in layout.names:
            _broadcast(self.group, tensors[name], self.timeout)
        settle(self.device)
        return tensors

    def leave(self) -> None:
        # the control plane's left key keeps the trainer from broadcasting to it again; its
        # sockets close with its process
        pass
