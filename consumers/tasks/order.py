"""Published order for an explorer: hands out the tasks of several partitions in the order their
publisher wrote them.

Keys spread a taskset over the `tasks` topic's partitions, and a consumer reads them partition by
partition. Each Task carries its place in the published sequence (`Task.published_order`).
`TaskMerge` buffers what the reader polled, per partition, and hands out the earliest head of
all (a k-way merge). A head may go only when no assigned partition could still hold an earlier
task: each assigned partition either has a buffered head (a partition's records are in publish
order) or has been read to its end. What leaves a partition is always the head of its buffer, so
a batch holds, per partition, the records that follow the ones handed out before, none left
out: committing the offset after a batch's last record of a partition skips nothing. An event
that is not a Task (nothing orders it) goes as soon as it heads its partition.

`PartitionEnds` says which partitions are read to their end: the reader's position (which moves
past transaction markers) at or past the partition's last stable offset. A partition whose
position the client does not know yet (nothing read since it was assigned or sought) starts at
the group's committed offset, or where `explorer.tasks_from` starts a new group. Ends are asked
of the broker again whenever records arrived since the last answer, so a partition counts as
ended only against an end read after the heads it lets through. A partition that stays short of
its end without moving for `STALL_S` (e.g. only aborted records left, which no position shows)
counts as ended, with a warning: order is relaxed there, nothing is skipped.

`OrderedTasks` joins the two for the explorer and makes its batches (`OrderedTasks.batch`). A member of a group merges the partitions it
holds: each member's tasks follow the published order over its share. Buffered tasks of a
partition this member loses, or rewinds, must be dropped (`drop`): the reader reads them again
from the group's committed offset or the rewind point.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable
from contextlib import ExitStack

from rft.config.connections import KafkaSettings
from rft.config.stream_start import StreamStart
from rft.errors import TransportError
from rft.events.models import Task
from rft.events.reader import Envelope, EventReader
from rft.events.transport import TopicAdmin, kafka_backend

log = logging.getLogger(__name__)

Partition = tuple[str, int]

# Seconds a partition may stay short of its end without moving before the merge stops waiting
STALL_S = 10.0
# Records asked of the reader per poll while the merge waits for heads of other partitions
POLL_RECORDS = 256
# While an assigned partition has nothing buffered, the buffer may grow to this many times
# POLL_RECORDS: the records of the partitions read first must not keep the others from being
# read (the client hands records out partition after partition)
STARVED_FACTOR = 16
# Seconds a batch waits for more tasks before it goes with what it has
BATCH_WAIT_S = 5.0

_FIRST = (-1, -1)  # the order of an event that is not a Task: before every task


def published_order(env: Envelope) -> tuple[int, int]:
    event = env.event
    return event.published_order if isinstance(event, Task) else _FIRST


# Which of the given partitions (assigned, none buffered) are read to their end; `fresh`: records
# arrived since the last call, so an end known from before them may be stale
Finished = Callable[[set[Partition], bool], set[Partition]]


class TaskMerge:
    """The k-way merge by published order over buffered partitions (no I/O)."""

    def __init__(self) -> None:
        self._queues: dict[Partition, deque[Envelope]] = {}
        self._arrived = False  # records added since `finished` was last asked

    @property
    def buffered(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def add(self, envelopes: Iterable[Envelope]) -> None:
        """Buffer polled envelopes (each partition's in reading order)."""
        for env in envelopes:
            tp = (env.topic, env.partition)
            queue = self._queues.setdefault(tp, deque())
            if queue and env.offset <= queue[-1].offset:
                # the reader went back (a seek): it reads again what was buffered from here
                while queue and queue[-1].offset >= env.offset:
                    queue.pop()
            queue.append(env)
            self._arrived = True

    def headless(self, assigned: Collection[Partition]) -> set[Partition]:
        """The partitions of `assigned` with nothing buffered: read to their end, or not read
        far enough yet."""
        return {tp for tp in assigned if not self._queues.get(tp)}

    def drop(self, partitions: Collection[Partition]) -> int:
        """Forget what is buffered of `partitions`; returns how many envelopes that was."""
        dropped = 0
        for tp in partitions:
            queue = self._queues.pop(tp, None)
            dropped += len(queue) if queue else 0
        return dropped

    def take(
        self, count: int, assigned: Collection[Partition], finished: Finished
    ) -> list[Envelope]:
        """Up to `count` envelopes in published order; fewer when an assigned partition with
        nothing buffered may still hold an earlier task. Buffers of partitions not in
        `assigned` are dropped (this member no longer reads them)."""
        held = set(assigned)
        self.drop([tp for tp in self._queues if tp not in held])
        out: list[Envelope] = []
        ended: set[Partition] = set()
        while len(out) < count:
            heads = {tp: q[0] for tp, q in self._queues.items() if q}
            if not heads:
                break
            tp, head = min(heads.items(), key=lambda item: (published_order(item[1]), item[0]))
            if published_order(head) != _FIRST:
                waiting = held - heads.keys() - ended
                if waiting:
                    fresh, self._arrived = self._arrived, False
                    ended |= finished(waiting, fresh)
                    if waiting - ended:
                        break
            out.append(self._queues[tp].popleft())
        return out


class PartitionEnds:
    """Which partitions of a reader's assignment are read to their end (see the module doc)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        group: str,
        start: StreamStart,
        *,
        stall_s: float = STALL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kafka = kafka
        self._group = group
        self._start = start
        self._stall_s = stall_s
        self._clock = clock
        self._ends: dict[Partition, int] = {}  # last stable offsets, as last read
        # where the reader starts partitions it has read nothing of: fixed until a seek (the
        # caller forgets the partition) or a first record (the position is known from then on)
        self._starts: dict[Partition, int] = {}
        self._short: dict[Partition, tuple[int, float]] = {}  # (floor, since) short of the end

    def forget(self, partitions: Collection[Partition]) -> None:
        for tp in partitions:
            self._ends.pop(tp, None)
            self._starts.pop(tp, None)
            self._short.pop(tp, None)

    def finished(
        self, reader: EventReader, partitions: set[Partition], fresh: bool
    ) -> set[Partition]:
        positions = reader.positions()
        for tp in positions:
            self._starts.pop(tp, None)  # read from since: the position is the truth
        try:
            self._learn_bounds(partitions, positions.keys(), fresh)
        except TransportError as exc:
            # Kafka is away (an outage the reader's own polls ride out and bound): no partition
            # is known finished now, so no task goes ahead of one it may have to wait for
            log.warning("which task partitions are finished is unknown now: %s", exc)
            return set()
        floors = self._starts | positions
        now = self._clock()
        out = set()
        for tp in partitions:
            floor, end = floors[tp], self._ends[tp]
            if floor >= end:
                out.add(tp)
                self._short.pop(tp, None)
                continue
            seen, since = self._short.get(tp, (floor, now))
            if seen != floor:
                seen, since = floor, now
            self._short[tp] = (seen, since)
            if now - since >= self._stall_s:
                log.warning(
                    "%s[%d]: at offset %d of %d for %.0fs with nothing to read (aborted records?):"
                    " tasks of other partitions go on without waiting for it",
                    tp[0],
                    tp[1],
                    floor,
                    end,
                    now - since,
                )
                out.add(tp)
        return out

    def _learn_bounds(
        self, partitions: set[Partition], positioned: Collection[Partition], fresh: bool
    ) -> None:
        """The committed ends of `partitions` (all again when `fresh`) and the start offsets of
        those with no position yet, from an admin client opened only when needed."""
        with ExitStack() as stack:
            admin: TopicAdmin | None = None

            def open_admin() -> TopicAdmin:
                nonlocal admin
                if admin is None:
                    admin = stack.enter_context(kafka_backend(self._kafka).admin())
                return admin

            if fresh or not partitions <= self._ends.keys():
                topics = sorted({t for t, _ in partitions})
                for b in open_admin().partition_bounds(topics, committed=True):
                    self._ends[(b.topic, b.partition)] = b.high
            unknown = partitions - set(positioned) - self._starts.keys()
            if unknown:
                self._starts |= self._start_offsets(open_admin(), unknown)

    def _start_offsets(self, admin: TopicAdmin, partitions: set[Partition]) -> dict[Partition, int]:
        """Where the reader starts partitions it has read nothing of: the group's committed
        offset, else where `explorer.tasks_from` starts a new group."""
        committed = {
            (o.topic, o.partition): o.offset
            for o in admin.group_offsets(self._group)
            if (o.topic, o.partition) in partitions
        }
        rest = partitions - committed.keys()
        if not rest:
            return committed
        topics = sorted({t for t, _ in rest})
        if self._start.kind == "timestamp":
            assert self._start.timestamp_ms is not None
            found = admin.offsets_for_timestamp(topics, self._start.timestamp_ms)
        elif self._start.kind == "earliest":
            found = {(b.topic, b.partition): b.low for b in admin.partition_bounds(topics)}
        else:  # latest: the group starts at the end, so nothing before it is waited for
            found = dict(self._ends)
        return committed | {tp: found[tp] for tp in rest}


class OrderedTasks:
    """An explorer's tasks in published order: a `TaskMerge` over what `reader` polls."""

    def __init__(self, ends: PartitionEnds, poll_records: int = POLL_RECORDS) -> None:
        self.merge = TaskMerge()
        self.ends = ends
        self.poll_records = poll_records

    def take(self, reader: EventReader, count: int) -> list[Envelope]:
        """Up to `count` buffered tasks that may go now (no polling)."""
        return self.merge.take(
            count,
            reader.assignment(),
            lambda partitions, fresh: self.ends.finished(reader, partitions, fresh),
        )

    def batch(self, reader: EventReader, want: int, stop: threading.Event) -> list[Envelope]:
        """Up to `want` tasks in published order over this member's partitions; waits up to
        BATCH_WAIT_S for a full batch, then returns what it has.

        A rebalance happens inside poll: tasks already taken or buffered from a partition this
        member has just lost are dropped, and whoever holds the partition next reads them again
        from the group's committed offset: another member, or this one when the partition comes
        straight back (the reader seeks it there), so no task is ever skipped past the commit and
        a step never commits offsets of a partition it does not hold.

        It polls at least once per batch, without waiting for records, even when the buffer holds the whole
        batch: the group's rebalances run inside members' polls, so a member living off its
        buffer would hold up a joining member's share until it ran dry (seen: a second explorer
        waited a whole run for its first partition).
        """
        self.poll(reader, timeout_s=reader.group_poll_s)
        out: list[Envelope] = []
        deadline = time.monotonic() + BATCH_WAIT_S
        while not stop.is_set():
            out += self.take(reader, want - len(out))
            if len(out) >= want or time.monotonic() > deadline:
                break
            out = drop_revoked(out, self.poll(reader, timeout_s=1.0))
        return out

    def poll(self, reader: EventReader, timeout_s: float) -> set[Partition]:
        """Poll `reader` once into the merge; returns the partitions it revoked (their buffered
        tasks are dropped; a caller drops its own). With `poll_records` or more buffered it asks
        for one record: a poll made to serve the group (see `Explorer._poll_batch`) then grows
        the buffer by at most one per step, while each step takes a batch from it. While an
        assigned partition has nothing buffered, the bound is STARVED_FACTOR times higher: the
        client hands out one partition's records after another's, so one-record polls would
        reach a partition read late only after the STALL_S that gives up its order."""
        buffered = self.merge.buffered
        starved = bool(self.merge.headless(reader.assignment()))
        full = buffered >= self.poll_records * (STARVED_FACTOR if starved else 1)
        records = 1 if full else self.poll_records
        self.merge.add(reader.poll(records, timeout_s=timeout_s))
        revoked = reader.take_revoked()
        self.drop(revoked)
        return revoked

    def drop(self, partitions: Collection[Partition]) -> None:
        """Forget what is buffered of `partitions` (revoked, or rewound: read again)."""
        if partitions:
            dropped = self.merge.drop(partitions)
            self.ends.forget(partitions)
            if dropped:
                log.info(
                    "%d buffered task(s) of %s dropped: read again from the group's offset",
                    dropped,
                    sorted(partitions),
                )


def drop_revoked(batch: list[Envelope], revoked: set[tuple[str, int]]) -> list[Envelope]:
    """`batch` without the envelopes of partitions in `revoked`."""
    if not revoked:
        return batch
    kept = [e for e in batch if (e.topic, e.partition) not in revoked]
    if len(kept) < len(batch):
        log.info(
            "rebalance: %d task(s) of revoked partitions %s dropped: the partition's next owner "
            "(this explorer too, if it comes back) reads them again from the committed offset",
            len(batch) - len(kept),
            sorted(revoked),
        )
    return kept
