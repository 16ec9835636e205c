"""EventReader: typed reading of rft events from Kafka as a consumer-group member.

Polls batches, decodes them with `EventCodec` and hands out `Envelope`s that carry where each event
came from and the producer's trace context. An undecodable record is parked in the dead-letter
topic and skipped; its offset is committed with the next commit that reaches it. Commits are
manual; reads see committed transactions only. While Kafka is down, poll() returns nothing
until the cluster's outage window (`stack.kafka.outage_timeout`) is spent, and commits are
retried inside it; a commit counts as done only once the broker has acknowledged it.

Rebalances: a partition revoked from (or lost by) this member and later assigned to it again,
often in the very poll that revoked it after a session expired in an outage, is read again from
a position the reader chooses itself, never from wherever the client happened to be: its records
in that poll are dropped (some may predate the revocation, some follow it) and the partition is
sought to its `Resume` position: the group's committed offset (`Resume.COMMITTED`, for members
that drop what they held of a revoked partition, like the explorer), or one past the last record
this reader handed out (`Resume.CONTINUE`, for members that keep what they read, like the
trainer, whose own ledger, not the group's offset, says what it has consumed).

Fences: a static member's membership can be fenced by the broker itself (a coordinator that
restarted mid-join hands the member's instance id a new member id, and the old one is told it was
fenced by "another consumer with the same group.instance.id"). A reader given a `fence_check`
asks it whether another process really took over; when not, it drops its client, rejoins the
group, and reports every partition it held as revoked, instead of ending the process.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from rft.config.connections import KafkaSettings
from rft.errors import DecodeError, FencedError, TransportError
from rft.events.codec import EventCodec
from rft.events.dead_letter import DeadLetterParker
from rft.events.models import Event
from rft.events.transport import (
    DEFAULT_UNREACHABLE_TIMEOUT_S,
    Headers,
    RecordConsumer,
    TopicPartitionOffset,
    kafka_backend,
    kafka_outage_window,
    retriable_in_outage,
)
from rft.stack.outage_window import OutageWindow
from rft.tracing.otel import Context
from rft.tracing.propagation import extract_trace_context

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Envelope:
    """A decoded event and where it was read."""

    event: Event
    topic: str
    partition: int
    offset: int
    key: bytes | None
    headers: Headers
    timestamp_ms: int

    @property
    def trace_context(self) -> Context:
        """The producer's trace context: pass it as `context=` when starting the consumer span."""
        return extract_trace_context(self.headers)

    def header(self, name: str) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)


_Partition = tuple[str, int]

# Seconds between attempts to read the group's committed offsets while Kafka is unreachable.
COMMITTED_RETRY_S = 1.0


class Resume(enum.Enum):
    """Where a partition this member gets back after losing it is read from."""

    COMMITTED = "committed"  # the group's committed offset: what was held is dropped
    CONTINUE = "continue"  # one past the last record handed out: what was read is kept


class _ParkedOffsets:
    """Which parked records a commit may step over.

    A commit at offset T of a partition also covers the parked records that directly follow the
    last record at or below T-1, in polling order. Offsets are not contiguous (transaction
    markers take offsets), so "directly follow" means: the record polled just before the parked
    one is already covered.
    """

    def __init__(self) -> None:
        self._last_polled: dict[_Partition, int] = {}
        # per partition: (offset polled just before, parked offset), in polling order
        self._parked: dict[_Partition, list[tuple[int | None, int]]] = {}
        self._committed: dict[_Partition, int] = {}

    def polled(self, tp: _Partition, offset: int) -> None:
        self._last_polled[tp] = offset

    def parked(self, tp: _Partition, offset: int) -> None:
        self._parked.setdefault(tp, []).append((self._last_polled.get(tp), offset))
        self._last_polled[tp] = offset

    def last_polled(self) -> dict[_Partition, int]:
        return dict(self._last_polled)

    def forget(self, tp: _Partition | None = None) -> None:
        """Drop what is known of `tp` (default: every partition) after a seek moved it."""
        for known in (self._parked, self._last_polled, self._committed):
            if tp is None:
                known.clear()
            else:
                known.pop(tp, None)

    def extend(self, targets: dict[_Partition, int]) -> dict[_Partition, int]:
        out = dict(targets)
        for tp, entries in self._parked.items():
            start = target = out.get(tp, self._committed.get(tp))
            for before, offset in entries:
                if target is not None and offset < target:
                    continue
                if (target is None and before is None) or (
                    target is not None and before is not None and before < target
                ):
                    target = offset + 1
                else:
                    break
            if target is not None and (target != start or tp in out):
                out[tp] = target
        return out

    def committed(self, offsets: Sequence[TopicPartitionOffset]) -> None:
        for o in offsets:
            tp = (o.topic, o.partition)
            self._committed[tp] = max(o.offset, self._committed.get(tp, o.offset))
            kept = [(b, q) for b, q in self._parked.get(tp, []) if q >= o.offset]
            if kept:
                self._parked[tp] = kept
            else:
                self._parked.pop(tp, None)


class EventReader:
    """Reads events of `topics` as a member of consumer group `group_id`."""

    def __init__(
        self,
        consumer: RecordConsumer,
        codec: EventCodec,
        parker: DeadLetterParker | None,
        window: OutageWindow | None = None,
        resume: Resume = Resume.COMMITTED,
        from_beginning: bool = True,
    ) -> None:
        self._consumer = consumer
        self._window = window
        self._codec = codec
        self._parker = parker
        self._parked = _ParkedOffsets()
        self._resume = resume
        self._from_beginning = from_beginning
        # partitions revoked and not yet re-positioned, and those the caller has not been told of
        self._to_reposition: set[_Partition] = set()
        self._revoked: set[_Partition] = set()
        # per partition, the offset after the last record handed out (or sought to)
        self._next: dict[_Partition, int] = {}
        self._fence_check: Callable[[], bool] | None = None

    def check_fences_with(self, really_fenced: Callable[[], bool]) -> None:
        """When the group fences this member, call `really_fenced()`: True ends the reader with
        the fence (another process holds this member's id); False rejoins the group."""
        self._fence_check = really_fenced

    @classmethod
    def open(
        cls,
        kafka_settings: KafkaSettings,
        group_id: str,
        topics: Sequence[str],
        from_beginning: bool = True,
        dead_letter_topic: str | None = None,
        *,
        codec: EventCodec | None = None,
        config: Mapping[str, Any] | None = None,
        unreachable_timeout_s: float | None = DEFAULT_UNREACHABLE_TIMEOUT_S,
        resume: Resume = Resume.COMMITTED,
    ) -> EventReader:
        """A reader for `kafka_settings`; it joins the group on the first poll.

        `from_beginning` applies where the group has no committed offset yet. Without a
        `dead_letter_topic`, an undecodable record makes poll() raise DecodeError naming it.
        `resume` says where a partition that comes back to this member is read from.
        """
        backend = kafka_backend(kafka_settings)
        codec = codec or EventCodec.default()
        consumer = backend.consumer(
            group_id, topics, from_beginning, config, unreachable_timeout_s=unreachable_timeout_s
        )
        parker = None
        if dead_letter_topic is not None:
            parker = DeadLetterParker(backend.producer(), dead_letter_topic, group_id, codec)
        return cls(
            consumer,
            codec,
            parker,
            kafka_outage_window(kafka_settings),
            resume=resume,
            from_beginning=from_beginning,
        )

    def _durably(self, what: str, step: Callable[[], None]) -> None:
        """`step` once, or, with an outage window, until Kafka acknowledges it."""
        if self._window is None:
            step()
        else:
            self._window.call(what, step, retriable_in_outage)

    @property
    def parked_count(self) -> int:
        """Records parked in the dead-letter topic by this reader."""
        return self._parker.parked if self._parker is not None else 0

    def poll(self, max_events: int = 500, timeout_s: float = 1.0) -> list[Envelope]:
        """Up to `max_events` decoded events, waiting at most `timeout_s` for the first record.

        Raises OutageError when no broker has been reachable for the unreachable timeout.
        """
        try:
            records = self._consumer.poll(max_events, timeout_s)
        except FencedError as exc:
            if self._fence_check is None or self._fence_check():
                raise
            log.warning(
                "%s; no other process holds this member's id (its fence check says so): the "
                "broker fenced it while restarting. Rejoining the group",
                exc,
            )
            self.rejoin()
            records = []
        revoked = self._consumer.take_revoked()
        if revoked:
            self._revoked |= revoked
            self._to_reposition |= revoked
            for tp in revoked:
                self._parked.forget(tp)
        if self._to_reposition:
            records = self._reposition(records)
        envelopes: list[Envelope] = []
        decode = self._codec.decode
        for i, r in enumerate(records):
            tp = (r.topic, r.partition)
            try:
                if r.value is None:
                    raise DecodeError("record has no value (a tombstone is not an rft event)")
                event = decode(r.value)
            except DecodeError as exc:
                if self._parker is None:
                    self._rewind(records[i:])
                    raise type(exc)(f"{r.topic}[{r.partition}]@{r.offset}: {exc}") from exc
                self._parker.park(r, exc)
                self._parked.parked(tp, r.offset)
                self._next[tp] = r.offset + 1
                continue
            self._parked.polled(tp, r.offset)
            self._next[tp] = r.offset + 1
            envelopes.append(
                Envelope(event, r.topic, r.partition, r.offset, r.key, r.headers, r.timestamp_ms)
            )
        return envelopes

    def _reposition(self, records: list[Any]) -> list[Any]:
        """Seek each revoked partition that this member holds again to its `Resume` position,
        and drop its records from `records`: they are read again from there."""
        back = self._to_reposition & set(self._consumer.assignment())
        if not back:
            return records
        self._to_reposition -= back
        targets = self._resume_positions(back)
        moved: set[_Partition] = set()
        for tp in sorted(back):
            target = targets.get(tp)
            if target is None and not self._from_beginning:
                continue  # a group that starts at the end: where the client put it is right
            moved.add(tp)  # its records of this poll are read again from the new position
            try:
                if target is None:
                    # nothing committed and nothing read yet: the group's first read of it
                    self._consumer.seek_to_beginning([tp])
                else:
                    self._consumer.seek(tp[0], tp[1], target)
            except TransportError as exc:
                # just assigned and not fetching yet (librdkafka: "Erroneous state"): its
                # records are dropped until the seek of a later poll succeeds
                log.info("%s[%d]: seek deferred to the next poll (%s)", tp[0], tp[1], exc)
                self._to_reposition.add(tp)
                continue
            if target is None:
                self._next.pop(tp, None)
                why = "its start: nothing committed"
            else:
                self._next[tp] = target
                why = (
                    "the group's committed offset"
                    if self._resume is Resume.COMMITTED
                    else "after the last record read"
                )
            log.info("%s[%d] assigned again: read from %s (%s)", tp[0], tp[1], target or 0, why)
        return [r for r in records if (r.topic, r.partition) not in moved]

    def _resume_positions(self, partitions: set[_Partition]) -> dict[_Partition, int]:
        if self._resume is Resume.CONTINUE:
            return {tp: self._next[tp] for tp in partitions if tp in self._next}
        while True:
            try:
                found = self._consumer.committed(timeout_s=10.0)
                break
            except TransportError as exc:
                # the group's offsets are the truth for a member that dropped what it held:
                # wait for them (within the outage window) rather than guess
                if self._window is None:
                    raise
                self._window.failed(f"reading the group's committed offsets: {exc}")
                time.sleep(COMMITTED_RETRY_S)
        return {
            (o.topic, o.partition): o.offset for o in found if (o.topic, o.partition) in partitions
        }

    def _rewind(self, unread: Sequence[Any]) -> None:
        # Without a dead-letter topic, nothing after the bad record may be skipped: put every
        # partition back to its first record not handed out, so the next poll meets it again.
        first: dict[_Partition, int] = {}
        for r in unread:
            first.setdefault((r.topic, r.partition), r.offset)
        for (topic, partition), offset in first.items():
            self._consumer.seek(topic, partition, offset)

    def offsets_after(
        self, envelopes: Sequence[Envelope] | None = None, metadata: str = ""
    ) -> list[TopicPartitionOffset]:
        """Next-to-read offsets covering `envelopes` and the parked records right after them,
        each carrying `metadata` for the commit.

        With `envelopes=None`, everything polled so far. Parked records are made durable first.
        """
        targets: dict[_Partition, int] = {}
        for e in envelopes or ():
            tp = (e.topic, e.partition)
            if targets.get(tp, -1) < e.offset + 1:
                targets[tp] = e.offset + 1
        if envelopes is None:
            for tp, offset in self._parked.last_polled().items():
                targets[tp] = offset + 1
        targets = self._parked.extend(targets)
        if self._parker is not None:
            self._durably("park in dead-letter", self._parker.flush)
        return [TopicPartitionOffset(t, p, o, metadata) for (t, p), o in sorted(targets.items())]

    def mark_committed(self, offsets: Sequence[TopicPartitionOffset]) -> None:
        """Record that `offsets` were committed elsewhere (by a transaction)."""
        self._parked.committed(offsets)

    def commit(
        self, envelopes: Sequence[Envelope] | None = None, metadata: str = ""
    ) -> list[TopicPartitionOffset]:
        """Commit the offsets after `envelopes` (default: after everything polled), each with
        `metadata`; return them."""
        offsets = self.offsets_after(envelopes, metadata)
        self._durably("commit of offsets", lambda: self._consumer.commit(offsets))
        self.mark_committed(offsets)
        return offsets

    def committed(self, timeout_s: float = 10.0) -> list[TopicPartitionOffset]:
        """The group's committed offsets and their metadata on every partition of the topics."""
        return self._consumer.committed(timeout_s)

    def group_metadata(self) -> Any:
        return self._consumer.group_metadata()

    def assignment(self) -> list[tuple[str, int]]:
        return self._consumer.assignment()

    @property
    def group_poll_s(self) -> float:
        """How long a poll made only to keep this member's group going should wait (its
        client's `RecordConsumer.group_poll_s`)."""
        return self._consumer.group_poll_s

    def take_revoked(self) -> set[tuple[str, int]]:
        """Partitions revoked from (or lost by) this member since the last call; what this reader
        knew of them is dropped. Envelopes of them that a caller still holds must not be
        committed: whoever holds the partition next, this member included, reads them again
        from the group's committed offset (`Resume.COMMITTED`)."""
        revoked, self._revoked = self._revoked, set()
        return revoked

    def rejoin(self) -> None:
        """Leave the group and join it again with a new client (after a fence the broker made
        on its own). Every partition held counts as revoked (take_revoked), and each one that
        comes back is read from its `Resume` position."""
        self._consumer.rejoin()

    def positions(self) -> dict[tuple[str, int], int]:
        """The next offset to read of each assigned partition whose position is known."""
        return self._consumer.positions()

    def rewind(self, envelopes: Sequence[Envelope]) -> None:
        """Read `envelopes` again (their transaction was aborted): each partition they came from
        that this member still holds goes back to the first of them. A partition that moved to
        another member during an outage is read by it from the group's committed offset."""
        first: dict[_Partition, int] = {}
        for e in envelopes:
            tp = (e.topic, e.partition)
            first[tp] = min(e.offset, first.get(tp, e.offset))
        held = set(self._consumer.assignment())
        for (topic, partition), offset in sorted(first.items()):
            if (topic, partition) not in held:
                continue
            try:
                self.seek(topic, partition, offset)
            except TransportError as exc:
                # a rebalance is under way: the partition's next owner starts at the commit
                log.info("not rewinding %s[%d] (%s); the group reassigns it", topic, partition, exc)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read `topic`[`partition`] from `offset` on (now, or once the partition is assigned)."""
        self._parked.forget((topic, partition))
        self._next[(topic, partition)] = offset
        self._consumer.seek(topic, partition, offset)

    def seek_to_beginning(self) -> None:
        """Re-read every assigned partition (or the first assignment) from its start."""
        self._parked.forget()
        self._next.clear()
        self._consumer.seek_to_beginning()

    def seek_to_timestamp(self, timestamp_ms: int) -> None:
        """Read from the first record at or after `timestamp_ms` (ms since the epoch)."""
        self._parked.forget()
        self._next.clear()
        self._consumer.seek_to_timestamp(timestamp_ms)

    def close(self) -> None:
        try:
            if self._parker is not None:
                self._parker.flush()
                self._parker.close()
        finally:
            self._consumer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
