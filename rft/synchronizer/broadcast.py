"""The `nccl` transport: a version travels as broadcasts from the trainer, tensor by tensor.

Each generation is a process group of its own (not the default one: an FSDP trainer has that)
of the trainer (rank 0) and its members, NCCL between GPUs and gloo on the CPU; the trainer
broadcasts the version's tensors in the layout's order into fresh tensors on each member's
device. A member that died (gloo fails at once) or hangs (the broadcast blocks) fails the whole
generation's broadcast within the timeout (NCCL's groups are made with blocking waits, an error
handling that never ends the process and non-blocking communicators whose setup gives up): the
group's control plane then drops it and the members join again. NCCL cannot put two ranks on one GPU: trainer and explorer sharing a GPU
need the `memory` transport (rft.synchronizer.shared_memory).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Iterator
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


# Read by ProcessGroupNCCL's constructor, for that group alone. Blocking wait: a broadcast that
# passes the timeout raises on the thread waiting for it, after aborting the communicator, so the
# trainer drops the generation and goes on. Error handling 2 (clean up only): torch's watchdog
# aborts a failed group's communicator without ending the process; its default (3) ends the whole
# process, trainer or explorer, when one member of a weight-sync group hangs.
_NCCL_GROUP_ENV = {"TORCH_NCCL_BLOCKING_WAIT": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}
_environment_lock = threading.Lock()
# How long a non-blocking communicator's setup may take, in whole seconds. torch reads it once per
# process, the first time such a communicator is waited for (at the group's first broadcast, not
# its constructor), and only those use it; its own default is 30 minutes.
_NONBLOCKING_TIMEOUT = "TORCH_NCCL_NONBLOCKING_TIMEOUT"


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    with _environment_lock:
        saved = {key: os.environ.get(key) for key in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _new_group(store: Any, rank: int, size: int, backend: str, timeout: timedelta) -> Backend:
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        # NCCL sets a communicator up at the first broadcast and, blocking, waits there for every
        # rank without end: a member that died after answering its generation would hang the
        # trainer. Non-blocking, the setup gives up after the timeout and the broadcast raises.
        options.config.blocking = 0
        os.environ.setdefault(_NONBLOCKING_TIMEOUT, str(max(1, math.ceil(timeout.total_seconds()))))
        with _environment(_NCCL_GROUP_ENV):
            return dist.ProcessGroupNCCL(store, rank, size, options)
    return dist.ProcessGroupGloo(store, rank, size, timeout)


def _broadcast(group: Any, tensors: list[torch.Tensor], timeout: timedelta) -> None:
    """Each of `tensors` from rank 0, every broadcast queued before the first is waited on (NCCL
    runs them back to back on its stream; a blocking wait per tensor would idle it in between),
    then each waited for, in order, all within `timeout` of being queued."""
    # Any: torch's stubs give Backend no broadcast, which gloo's and NCCL's have
    options = dist.BroadcastOptions()
    options.rootRank = 0
    options.timeout = timeout
    works = [group.broadcast([tensor], options) for tensor in tensors]
    for work in works:
        work.wait(timeout)


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
        sent = [tensors[name].to(self.device).contiguous() for name in layout.names]
        _broadcast(self.group, sent, self.timeout)
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
        _broadcast(self.group, [tensors[name] for name in layout.names], self.timeout)
        settle(self.device)
        return tensors

    def leave(self) -> None:
        # the control plane's left key keeps the trainer from broadcasting to it again; its
        # sockets close with its process
        pass
