"""The weight-sync group: a trainer sends each new version's weights straight to its explorers.

This is the fast path of `synchronizer.sync_method` `nccl` and `memory` beside the durable one
(the object store). It owns the group's control plane; how a version's tensors travel is the
transport's (rft.synchronizer.transport: broadcasts in a process group for `nccl`, memory shared
on the trainer's host for `memory`). The trainer hosts the rendezvous (a torch TCPStore at
`synchronizer.weight_group_address`, which also says which transport it sends with); every
explorer that wants versions this way joins it, and the group holds the trainer and the explorers
that joined. A version travels in the order and layout the generation's record names (HF names,
shapes, dtypes).

Membership changes between versions, never during one. An explorer joins by registering its id in
the store; before the next version the trainer forms a new *generation* (under its own store
prefix, with the transport's own end of it) of the members still in the old one and those who
joined, and tells the old one to move on. Every member answers a new generation before any end of
the transport is made; one that does not within the timeout (it died or hangs) is left out, and the
generation is formed again without it. Control messages (the next version and its token, or
"regroup") go through the store, so a member waits for the next version as long as it likes while
each version's delivery and each group formation is bounded by `synchronizer.weight_group_timeout`:
a member that died or hangs costs the trainer at most that long once; a member whose explorer
closes it says so in the store, and the next version forms a generation without it at no wait. When
the transport fails the whole generation (a broadcast), the trainer drops the group; when it names
the members a version did not reach (shared memory), the next generation leaves them out. Either
way that version goes to them only through the store; members whose group broke or that were left
out join again, and a later version forms a group with them.

A member receives on a thread of its own into fresh tensors and keeps the newest complete
version for its explorer to take (`WeightGroupMember.take`) between rollouts; a version received
in part is dropped. What a received version may be used for (sampling, not committing before its
manifest exists) is the explorer's rule (rft.consumers.explorer.weight_follower), whichever
transport delivered it.
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

from rft.errors import ConfigError
from rft.fault_points import fault_point
from rft.synchronizer.transport import (
    WEIGHT_TRANSPORTS,
    Generation,
    Layout,
    Receiver,
    Sender,
)

__all__ = ["Layout", "Received", "WeightGroupHost", "WeightGroupMember", "split_address"]

log = logging.getLogger(__name__)

_GENERATION = "generation"
_JOINS = "joins"
_TRANSPORT = "transport"  # the trainer's sync_method and what its transport describes
# how often a member looks for the trainer's next control message
_MEMBER_POLL_S = 0.05
# how often the trainer looks for the members' answers to a new generation
_READY_POLL_S = 0.005
# pause before a member whose group broke, or that found no trainer, tries to join again
_REJOIN_S = 2.0


def _ready_key(generation: int, member: str) -> str:
    """Set by a member that saw `generation`'s record with itself in it."""
    return f"gen{generation}/ready/{member}"


def _go_key(generation: int) -> str:
    """Set by the trainer once every member of `generation` is ready: they may create their
    ends of the transport."""
    return f"gen{generation}/go"


def _left_key(generation: int, member: str) -> str:
    """Set by a member that stops following `generation`, so the next version forms a
    generation without it."""
    return f"gen{generation}/left/{member}"


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


class WeightGroupHost:
    """The trainer's end: hosts the rendezvous and sends versions (`send`) with the transport
    of `sync_method` (a name in WEIGHT_TRANSPORTS)."""

    def __init__(
        self,
        address: str,
        timeout_s: float,
        device: str | torch.device = "cpu",
        sync_method: str = "nccl",
    ) -> None:
        host, port = split_address(address)
        self.port = port
        self.timeout = timedelta(seconds=timeout_s)
        self.device = torch.device(device)
        self.sync_method = sync_method
        self.transport = WEIGHT_TRANSPORTS.get(sync_method)()
        self._described = self.transport.describe(self.device)
        try:
            self._store = dist.TCPStore(
                host, port, is_master=True, wait_for_workers=False, timeout=self.timeout
            )
        except RuntimeError as exc:  # the port is taken (another run's trainer?) or not ours
            raise ConfigError(
                f"synchronizer.weight_group_address: cannot host the weight-sync group at "
                f"{address}: {str(exc).splitlines()[0]}"
            ) from exc
        self._store.set(
            _TRANSPORT, json.dumps({"sync_method": sync_method, "described": self._described})
        )
        self._store.set(_GENERATION, "0")
        self._store.add(_JOINS, 0)
        self.generation = 0
        self._sender: Sender | None = None
        self._members: list[str] = []
        self._missed: set[str] = set()  # members a version did not reach: not in the next
        self._layout: Layout | None = None
        self._joins_seen = 0
        self._messages = 0  # control messages sent in this generation

    @property
    def members(self) -> list[str]:
        """The explorers of the current generation (empty while there is no group)."""
        return list(self._members) if self._sender is not None else []

    def send(self, version: int, token: int, tensors: dict[str, torch.Tensor]) -> list[str]:
        """Send `tensors` as `version` (its `token` lets explorers match it to the manifest) to
        every member; returns the members that received it whole (empty: nobody did, the store
        is the only path for this version). Never waits longer than the timeout for one group
        formation and one version's delivery."""
        layout = Layout.of(tensors)
        try:
            self._admit(layout)
            if self._sender is None:
                return []
            body = {"kind": "weights", "version": version, "token": str(token)}
            reached = self._sender.deliver(
                lambda fields: self._message({**body, **fields}), tensors, layout
            )
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
        missed = [m for m in self._members if m not in reached]
        if missed:
            log.warning(
                "weight-sync group generation %d: version %d did not reach %s within %.0fs; "
                "they load it from the store, and the next version goes without them until "
                "they join again",
                self.generation,
                version,
                ", ".join(missed),
                self.timeout.total_seconds(),
            )
            self._missed.update(missed)
        return reached

    def _admit(self, layout: Layout) -> None:
        """Form a new generation when explorers joined, a version missed some, or the
        weights' layout changed."""
        joined = self._new_joins()
        if self._sender is not None:
            self._missed.update(m for m in self._members if self._left(self.generation, m))
        if self._sender is None:
            if not joined:
                return
        elif not joined and not self._missed and layout == self._layout:
            return
        keep: list[str] = []
        if self._sender is not None:
            try:
                self._message({"kind": "regroup"})
                keep = [m for m in self._members if m not in joined and m not in self._missed]
            except RuntimeError:
                keep = []
            self._drop()
        self._missed = set()
        members = keep + [m for m in dict.fromkeys(joined)]
        while True:
            generation = self.generation + 1
            # written even without members: one left out learns it from the record
            record = {"members": members, "layout": layout.to_json()}
            self._store.set(f"gen{generation}/record", json.dumps(record))
            self._store.set(_GENERATION, str(generation))
            self.generation, self._members, self._layout, self._messages = (
                generation,
                members,
                layout,
                0,
            )
            if not members:
                return
            absent = self._unready(generation, members)
            if not absent:
                break
            log.warning(
                "weight-sync group generation %d: %s did not answer within %.0fs; formed again "
                "without them (they join again)",
                generation,
                ", ".join(absent),
                self.timeout.total_seconds(),
            )
            members = [m for m in members if m not in absent]
        # the members create their ends only now: NCCL sets up a communicator at the first
        # broadcast and waits there for every rank, so one that died unseen would cost the
        # setup's own timeout (rft.synchronizer.broadcast); gloo's constructor would wait it out
        self._store.set(_go_key(generation), "1")
        prefix = dist.PrefixStore(f"gen{generation}/pg/", self._store)
        self._sender = self.transport.sender(
            Generation(prefix, members, self._described, self.device, self.timeout)
        )
        log.info(
            "weight-sync group generation %d: trainer and %d explorers (%s) over %s",
            generation,
            len(members),
            ", ".join(members),
            self.sync_method,
        )

    def _unready(self, generation: int, members: list[str]) -> list[str]:
        """The members that did not say they saw `generation` within the timeout."""
        deadline = time.monotonic() + self.timeout.total_seconds()
        waiting = list(members)
        while waiting and time.monotonic() < deadline:
            waiting = [m for m in waiting if not self._store.check([_ready_key(generation, m)])]
            if waiting:
                time.sleep(_READY_POLL_S)
        return waiting

    def _left(self, generation: int, member: str) -> bool:
        # one store lookup per member and version: cheaper than a broadcast that waits out the
        # timeout for a member whose explorer closed its end while its process lives on
        return bool(self._store.check([_left_key(generation, member)]))

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
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.close()

    def close(self) -> None:
        if self._sender is not None:
            with contextlib.suppress(RuntimeError):
                self._message({"kind": "close"})
        self._drop()


@dataclass(frozen=True)
class Received:
    """A version received whole over the group."""

    version: int
    token: int
    tensors: dict[str, torch.Tensor]


class _Refused(Exception):
    """The trainer's transport is one this member cannot receive from."""


class WeightGroupMember:
    """An explorer's side: joins the group on a thread of its own and keeps the newest version
    received whole (`take`). Never raises into the explorer: when the trainer is not there, a
    group breaks, or the trainer's transport is not one it can use (another `sync_method`,
    memory on another host), it tries again later and the explorer goes on with the store."""

    def __init__(
        self,
        address: str,
        timeout_s: float,
        member_id: str,
        device: str | torch.device = "cpu",
        sync_method: str = "nccl",
    ) -> None:
        self.host, self.port = split_address(address)
        self.timeout = timedelta(seconds=timeout_s)
        self.member_id = member_id
        self.device = torch.device(device)
        self.sync_method = sync_method
        self.transport = WEIGHT_TRANSPORTS.get(sync_method)()
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
        refused = ""  # said once why this member cannot use the trainer's transport
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
            except _Refused as exc:
                if str(exc) != refused:
                    refused = str(exc)
                    log.warning(
                        "explorer %s: cannot join the weight-sync group: %s; versions come "
                        "from the store",
                        self.member_id,
                        exc,
                    )
                self._stop.wait(_REJOIN_S)
            except (RuntimeError, ValueError, KeyError, OSError) as exc:
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
        trainer = json.loads(store.get(_TRANSPORT))
        if trainer["sync_method"] != self.sync_method:
            raise _Refused(
                f"the trainer sends with sync_method {trainer['sync_method']}, this explorer "
                f"receives with {self.sync_method}"
            )
        described = trainer["described"]
        reason = self.transport.refuses(described, self.device)
        if reason is not None:
            raise _Refused(reason)
        seen = int(store.get(_GENERATION))
        number = int(store.add(_JOINS, 1))
        store.set(f"join/{number}", self.member_id)
        admitted = False
        while not self._stop.is_set():
            generation, record = self._next_generation(store, seen)
            if record is None:
                return
            seen = generation
            members = list(record["members"])
            if self.member_id not in members:
                if admitted:  # a version missed it: the trainer goes on without it
                    raise RuntimeError(f"generation {generation} was formed without this member")
                continue  # formed before this join was read: the next one holds it
            admitted = True
            store.set(_ready_key(generation, self.member_id), "1")
            fault_point("weight_group.answered")
            if not self._opened(store, generation):
                continue  # formed again without waiting for this member, or it stops
            prefix = dist.PrefixStore(f"gen{generation}/pg/", store)
            receiver = self.transport.receiver(
                Generation(prefix, members, described, self.device, self.timeout), self.member_id
            )
            self.generations_joined += 1
            layout = Layout.from_json(record["layout"])
            if not self._follow(store, generation, receiver, layout):
                return

    def _opened(self, store: Any, generation: int) -> bool:
        """Whether the trainer opened `generation` (every member answered); False once a newer
        one replaced it or this member stops."""
        while not self._stop.is_set():
            if store.check([_go_key(generation)]):
                return True
            if int(store.get(_GENERATION)) > generation:
                return False
            self._stop.wait(_MEMBER_POLL_S)
        return False

    def _next_generation(self, store: Any, after: int) -> tuple[int, dict[str, Any] | None]:
        while not self._stop.is_set():
            generation = int(store.get(_GENERATION))
            if generation > after:
                return generation, json.loads(store.get(f"gen{generation}/record"))
            self._stop.wait(0.2)
        return after, None

    def _follow(self, store: Any, generation: int, receiver: Receiver, layout: Layout) -> bool:
        """Receive versions of `generation`; True when it moves to a newer generation."""
        number = 0
        while not self._stop.is_set():
            number += 1
            key = f"gen{generation}/msg/{number}"
            # polled, not waited on: a wait that times out logs from C++ each time
            while not store.check([key]):
                if self._stop.wait(_MEMBER_POLL_S):
                    self._leave(store, generation, receiver)
                    return False
                # the trainer posts "regroup" before the next generation, so a member that saw
                # the newer generation after a stale look for the message looks once more
                if int(store.get(_GENERATION)) > generation and not store.check([key]):
                    raise RuntimeError(f"generation {generation} was replaced without this member")
            body = json.loads(store.get(key))
            if body["kind"] == "regroup":
                return True
            if body["kind"] == "close":
                raise RuntimeError("the trainer closed the weight-sync group")
            started = time.monotonic()
            tensors = receiver.receive(body, layout)
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
        self._leave(store, generation, receiver)
        return False

    def _leave(self, store: Any, generation: int, receiver: Receiver) -> None:
        """Say this member stops following `generation`: the trainer forms the next one
        without it, and the transport lets go of what it holds for it."""
        with contextlib.suppress(RuntimeError):
            store.set(_left_key(generation, self.member_id), "1")
            receiver.leave()
