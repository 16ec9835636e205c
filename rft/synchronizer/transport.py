"""How a version's tensors travel in the weight-sync group: the transports, by `sync_method`.

The group's control plane (rft.synchronizer.weight_group: the rendezvous store, generations,
joins, the version messages and their tokens) is the same for every transport; a transport only
moves one version's tensors from the trainer to the members of a generation. It owns this
protocol, the registry `WEIGHT_TRANSPORTS` keyed by `synchronizer.sync_method` (checked when the
config loads), and `Layout`, the weights a generation carries. Its entry `checkpoint` says it is
no fast path (trait `fast_path` false): versions travel through the object store alone.

Entries: `nccl` (rft.synchronizer.broadcast: broadcasts in a process group, NCCL between GPUs,
gloo on the CPU) and `memory` (rft.synchronizer.shared_memory: the trainer shares one buffer per
version with members on its own host, CUDA IPC on a GPU, a shared-memory file on the CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import torch

from rft.errors import ConfigError
from rft.registry import PartSpec, Registry


@dataclass(frozen=True)
class Layout:
    """The weights a generation carries, in the order a transport moves them."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    @classmethod
    def of(cls, tensors: dict[str, torch.Tensor]) -> Layout:
        names = tuple(tensors)
        return cls(
            names,
            tuple(tuple(int(d) for d in tensors[n].shape) for n in names),
            tuple(str(tensors[n].dtype).removeprefix("torch.") for n in names),
        )

    def to_json(self) -> dict[str, Any]:
        return {"names": self.names, "shapes": self.shapes, "dtypes": self.dtypes}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Layout:
        return cls(
            tuple(raw["names"]),
            tuple(tuple(s) for s in raw["shapes"]),
            tuple(raw["dtypes"]),
        )

    def torch_dtypes(self) -> tuple[torch.dtype, ...]:
        return tuple(getattr(torch, d) for d in self.dtypes)

    def empty(self, device: torch.device) -> dict[str, torch.Tensor]:
        return {
            name: torch.empty(shape, dtype=dtype, device=device)
            for name, shape, dtype in zip(self.names, self.shapes, self.torch_dtypes(), strict=True)
        }


@dataclass(frozen=True)
class Generation:
    """What either end of a transport is told of a new generation."""

    store: Any  # the generation's own prefix of the rendezvous store
    members: list[str]  # the explorers, in rank order (the trainer is rank 0)
    described: dict[str, Any]  # the trainer's transport, as its `describe` said
    device: torch.device  # this end's own
    timeout: timedelta


#: Posts the version's message to the generation's members, with the transport's own fields.
Post = Callable[[dict[str, Any]], None]


class Sender(Protocol):
    """The trainer's end of one generation."""

    def deliver(self, post: Post, tensors: dict[str, torch.Tensor], layout: Layout) -> list[str]:
        """Post the version's message and move `tensors` (in `layout`'s order) to the members;
        the members that received it whole. Bounded by the group's timeout; raises
        RuntimeError when the generation as a whole can no longer carry versions."""
        ...

    def close(self) -> None:
        """Let go of what the generation holds (a process group, shared buffers)."""
        ...


class Receiver(Protocol):
    """A member's end of one generation."""

    def receive(self, body: dict[str, Any], layout: Layout) -> dict[str, torch.Tensor]:
        """The version that `body` (its message) announces, in fresh tensors of the member's
        own, complete when this returns; raises (RuntimeError, OSError) when it did not arrive
        whole."""
        ...

    def leave(self) -> None:
        """This member stops following (its explorer ends): the trainer need not wait for it."""
        ...


class WeightTransport(Protocol):
    """One way for versions to travel in the group; its `describe` is stored at the
    rendezvous, so a member can tell whether it can use it before it joins."""

    def describe(self, device: torch.device) -> dict[str, Any]:
        """What a member needs to know of the trainer's end (JSON)."""
        ...

    def refuses(self, described: dict[str, Any], device: torch.device) -> str | None:
        """Why a member on `device` cannot receive from the trainer `described` (None: it can)."""
        ...

    def sender(self, generation: Generation) -> Sender:
        """The trainer's end of a new generation; bounded by its timeout, raises RuntimeError."""
        ...

    def receiver(self, generation: Generation, member_id: str) -> Receiver:
        """A member's end of a new generation."""
        ...


def store_only() -> WeightTransport:
    """`checkpoint`'s entry: there is no group to move versions in."""
    raise ConfigError("synchronizer.sync_method: checkpoint has no weight-sync group")


#: sync_method -> a factory of its transport (no arguments); trait `fast_path` (default true):
#: whether the trainer and the explorers form a weight-sync group at all.


@dataclass(frozen=True)
class WeightTransportSpec(PartSpec):
    """`fast_path`: versions reach explorers outside the checkpoint store too (a broadcast,
    shared memory); False: the durable copy is the only path."""

    fast_path: bool = True


WEIGHT_TRANSPORTS: Registry[Callable[[], WeightTransport], WeightTransportSpec] = Registry(
    "synchronizer.sync_method", WeightTransportSpec
)
WEIGHT_TRANSPORTS.lazy("checkpoint", "rft.synchronizer.transport:store_only", fast_path=False)
WEIGHT_TRANSPORTS.lazy("nccl", "rft.synchronizer.broadcast:BroadcastTransport")
WEIGHT_TRANSPORTS.lazy("memory", "rft.synchronizer.shared_memory:SharedMemoryTransport")


def has_fast_path(sync_method: str) -> bool:
    """Whether `sync_method` (a name in WEIGHT_TRANSPORTS) forms a weight-sync group."""
    return WEIGHT_TRANSPORTS.spec(sync_method).fast_path
