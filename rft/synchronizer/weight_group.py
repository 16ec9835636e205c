"""The weight-sync group: a trainer sends each new version's weights straight to its explorers.

This is the fast path of `synchronizer.sync_method: nccl` beside the durable one (the object
store). The trainer is rank 0 and hosts the rendezvous (a torch TCPStore at
`synchronizer.weight_group_address`); every explorer that wants versions this way joins it, and
the group holds the trainer and the explorers that joined (world size 1 + members). A version
travels tensor by tensor as broadcasts from rank 0 (NCCL between GPUs, gloo on the CPU), in the
order and layout the generation's record names (HF names, shapes, dtypes).

Membership changes between versions, never during one. An explorer joins by registering its id in
the store; before the next version the trainer forms a new *generation* (its own process group,
under its own store prefix) of the members still in the old one and those who joined, and tells
the old one to move on. Control messages (the next version and its token, or "regroup") go
through the store, so a member waits for the next version as long as it likes while each
broadcast and each group formation is bounded by `synchronizer.weight_group_timeout`: a member
that died or hangs costs the trainer at most that long once; the trainer then drops the group
and that version goes to explorers only through the store. Members whose group broke join again,
and the next version forms a group of those that did.

A member receives on a thread of its own into fresh tensors and keeps the newest complete
version for its explorer to take (`WeightGroupMember.take`) between rollouts; a version received
in part is dropped. What a received version may be used for (sampling, not committing before its
manifest exists) is the explorer's rule (rft.consumers.explorer.weight_follower).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend

from rft.errors import ConfigError

log = logging.getLogger(__name__)

_GENERATION = "generation"
_JOINS = "joins"
# how often a member looks for the trainer's next control message
_MEMBER_POLL_S = 0.05
# pause before a member whose group broke, or that found no trainer, tries to join again
_REJOIN_S = 2.0


def split_address(
    address: str, where: str = "synchronizer.weight_group_address"
) -> tuple[str, int]:
    """`host:port` as (host, port); ConfigError naming `where` otherwise."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{where}: {address!r} is not host:port")
    return host, int(port)


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return True
    except OSError:
        return False


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def _new_group(store: Any, rank: int, size: int, backend: str, timeout: timedelta) -> Backend:
    """A process group of its own (not the default one: an FSDP trainer has that)."""
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


def _settle(device: torch.device) -> None:
    """Until the device has done what was queued (NCCL's wait only orders streams)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Layout:
    """The weights a generation carries, in broadcast order."""

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

    def empty(self, device: torch.device) -> dict[str, torch.Tensor]:
        return {
            name: torch.empty(shape, dtype=getattr(torch, dtype), device=device)
            for name, shape, dtype in zip(self.names, self.shapes, self.dtypes, strict=True)
        }


class WeightGroupHost:
    """Rank 0, in the trainer: hosts the rendezvous and sends versions (`send`)."""

    def __init__(self, address: str, timeout_s: float, device: str | torch.device = "cpu") -> None:
        host, port = split_address(address)
        self.port = port
        self.timeout = timedelta(seconds=timeout_s)
        self.device = torch.device(device)
        self.backend = backend_for(self.device)
        try:
            self._store = dist.TCPStore(
                host, port, is_master=True, wait_for_workers=False, timeout=self.timeout
            )
        except RuntimeError as exc:  # the port is taken (another run's trainer?) or not ours
            raise ConfigError(
                f"synchronizer.weight_group_address: cannot host the weight-sync group at "
                f"{address}: {str(exc).splitlines()[0]}"
            ) from exc
        self._store.set(_GENERATION, "0")
        self._store.add(_JOINS, 0)
        self.generation = 0
        self._group: Backend | None = None
        self._members: list[str] = []
        self._layout: Layout | None = None
        self._joins_seen = 0
        self._messages = 0  # control messages sent in this generation

    @property
    def members(self) -> list[str]:
        """The explorers of the current generation (empty while there is no group)."""
        return list(self._members) if self._group is not None else []

    def send(self, version: int, token: int, tensors: dict[str, torch.Tensor]) -> list[str]:
        """Broadcast `tensors` as `version` (its `token` lets explorers match it to the
        manifest) to every member; returns the members that received it (empty: nobody did,
        the store is the only path for this version). Never waits longer than the timeout for
        one group formation and one version's broadcasts."""
        layout = Layout.of(tensors)
        try:
            self._admit(layout)
            if self._group is None:
                return []
            self._message({"kind": "weights", "version": version, "token": str(token)})
            for name in layout.names:
                _broadcast(self._group, tensors[name].to(self.device).contiguous(), self.timeout)
            _settle(self.device)
        except RuntimeError as exc:
            log.warning(
                "weight-sync group generation %d: version %d did not reach every member (%s); "
                "they load it from the store and join again",
                self.generation,
                version,
                exc,
            )
            self._drop()
            return []
        return list(self._members)

    def _admit(self, layout: Layout) -> None:
        """Form a new generation when explorers joined or the weights' layout changed."""
        joined = self._new_joins()
        if not joined and self._group is not None and layout == self._layout:
            return
        if not joined and self._group is None:
            return
        keep: list[str] = []
        if self._group is not None:
            try:
                self._message({"kind": "regroup"})
                keep = [m for m in self._members if m not in joined]
            except RuntimeError:
                keep = []
            self._drop()
        members = keep + [m for m in dict.fromkeys(joined)]
        generation = self.generation + 1
        record = {"members": members, "layout": layout.to_json(), "backend": self.backend}
        self._store.set(f"gen{generation}/record", json.dumps(record))
        self._store.set(_GENERATION, str(generation))
        self.generation, self._members, self._layout, self._messages = (
            generation,
            members,
            layout,
            0,
        )
        prefix = dist.PrefixStore(f"gen{generation}/pg/", self._store)
        self._group = _new_group(prefix, 0, 1 + len(members), self.backend, self.timeout)
        log.info(
            "weight-sync group generation %d: trainer and %d explorers (%s) over %s",
            generation,
            len(members),
            ", ".join(members),
            self.backend,
        )

    def _new_joins(self) -> list[str]:
        count = int(self._store.add(_JOINS, 0))
        ids: list[str] = []
        while self._joins_seen < count:
            self._joins_seen += 1
            key = f"join/{self._joins_seen}"
            self._store.wait([key], self.timeout)
            ids.append(self._store.get(key).decode())
        return ids

    def _message(self, body: dict[str, Any]) -> None:
        self._messages += 1
        self._store.set(f"gen{self.generation}/msg/{self._messages}", json.dumps(body))

    def _drop(self) -> None:
        group, self._group = self._group, None
        if group is not None:
            # a broken group's members learn it from their own failed broadcast or timeout
            with contextlib.suppress(RuntimeError):
                group.abort()  # NCCL: frees a communicator a dead peer left stuck

    def close(self) -> None:
        if self._group is not None:
            with contextlib.suppress(RuntimeError):
                self._message({"kind": "close"})
        self._drop()


@dataclass(frozen=True)
class Received:
    """A version received whole over the group."""

    version: int
    token: int
    tensors: dict[str, torch.Tensor]


class WeightGroupMember:
    """An explorer's side: joins the group on a thread of its own and keeps the newest version
    received whole (`take`). Never raises into the explorer: when the trainer is not there, or a
    group breaks, it tries again and the explorer goes on with the store."""

    def __init__(
        self,
        address: str,
        timeout_s: float,
        member_id: str,
        device: str | torch.device = "cpu",
    ) -> None:
        self.host, self.port = split_address(address)
        self.timeout = timedelta(seconds=timeout_s)
        self.member_id = member_id
        self.device = torch.device(device)
        self._lock = threading.Lock()
        self._newest: Received | None = None
        self._stop = threading.Event()
        self.generations_joined = 0
        self.versions_received = 0
        self._thread = threading.Thread(
            target=self._run, name=f"weight-group-{member_id}", daemon=True
        )
        self._thread.start()

    def take(self) -> Received | None:
        """The newest version received since the last take (None: nothing new)."""
        with self._lock:
            newest, self._newest = self._newest, None
        return newest

    def peek_version(self) -> int:
        """The version `take` would give now (0: none)."""
        with self._lock:
            return 0 if self._newest is None else self._newest.version

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.timeout.total_seconds() + 1.0)

    def _run(self) -> None:
        quiet = False  # said once that no trainer answers, until one does
        while not self._stop.is_set():
            # a plain connect first: TCPStore logs each failed attempt with a C++ stack trace
            if not _answers(self.host, self.port):
                if not quiet:
                    log.info(
                        "explorer %s: no trainer at %s:%d (synchronizer.weight_group_address) "
                        "yet; versions come from the store until it answers",
                        self.member_id,
                        self.host,
                        self.port,
                    )
                    quiet = True
                self._stop.wait(_REJOIN_S)
                continue
            quiet = False
            try:
                store = dist.TCPStore(self.host, self.port, is_master=False, timeout=self.timeout)
                self._serve(store)
            except (RuntimeError, ValueError, KeyError) as exc:
                if self._stop.is_set():
                    return
                log.info(
                    "explorer %s: weight-sync group unavailable (%s); versions come from the "
                    "store until it joins again",
                    self.member_id,
                    exc,
                )
                self._stop.wait(_REJOIN_S)

    def _serve(self, store: Any) -> None:
        """Join, then follow generations until this member's group breaks (raises) or stops."""
        seen = int(store.get(_GENERATION))
        number = int(store.add(_JOINS, 1))
        store.set(f"join/{number}", self.member_id)
        while not self._stop.is_set():
            generation, record = self._next_generation(store, seen)
            if record is None:
                return
            seen = generation
            members = list(record["members"])
            if self.member_id not in members:
                continue  # formed before this join was read: the next one holds it
            rank = 1 + members.index(self.member_id)
            prefix = dist.PrefixStore(f"gen{generation}/pg/", store)
            group = _new_group(prefix, rank, 1 + len(members), record["backend"], self.timeout)
            self.generations_joined += 1
            layout = Layout.from_json(record["layout"])
            if not self._follow(store, generation, group, layout):
                return

    def _next_generation(self, store: Any, after: int) -> tuple[int, dict[str, Any] | None]:
        while not self._stop.is_set():
            generation = int(store.get(_GENERATION))
            if generation > after:
                return generation, json.loads(store.get(f"gen{generation}/record"))
            self._stop.wait(0.2)
        return after, None

    def _follow(self, store: Any, generation: int, group: Any, layout: Layout) -> bool:
        """Receive versions of `generation`; True when it moves to a newer generation."""
        number = 0
        while not self._stop.is_set():
            number += 1
            key = f"gen{generation}/msg/{number}"
            # polled, not waited on: a wait that times out logs from C++ each time
            while not store.check([key]):
                if self._stop.wait(_MEMBER_POLL_S):
                    return False
                if int(store.get(_GENERATION)) > generation:
                    raise RuntimeError(f"generation {generation} was replaced without this member")
            body = json.loads(store.get(key))
            if body["kind"] == "regroup":
                return True
            if body["kind"] == "close":
                raise RuntimeError("the trainer closed the weight-sync group")
            started = time.monotonic()
            tensors = layout.empty(self.device)
            for name in layout.names:
                _broadcast(group, tensors[name], self.timeout)
            _settle(self.device)  # the engine reads them on another stream
            received = Received(int(body["version"]), int(body["token"]), tensors)
            with self._lock:
                if self._newest is None or received.version > self._newest.version:
                    self._newest = received
            self.versions_received += 1
            log.info(
                "explorer %s received weight version %d over the group in %.2fs",
                self.member_id,
                received.version,
                time.monotonic() - started,
            )
        return False
