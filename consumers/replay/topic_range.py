"""Bounded reads of topics: every committed event between a start and an end point, then stop.

A `RangeBound` says where a read starts or ends: offsets per partition, a timestamp, or (neither)
the partition's edge. `resolve_spans` turns a start and an end bound into one `[start, end)`
offset span per partition, against the broker's offsets at that moment: the default end is the
last stable offset, so a read never waits for a transaction that is still open, and events written
after the read began are left out. `RangeReader` reads the spans as a throwaway consumer group
that never commits. An undecodable record is counted and skipped (a read-only tool parks nothing).

The order of the events depends only on the records in the spans, never on when each partition's
fetches land: `RangeReader` merges the partitions with `PartitionMerge`, by the key
`(offset - span start, topic, partition)` (transaction markers and aborted records count in the
offsets). Two reads of one range deliver the same events in the same order, in whatever batch
sizes they poll, and a read resumed from per-partition offsets inside the spans (an offline
trainer's resume: `seek`) delivers exactly what an uninterrupted read would have delivered from
there. An undecodable record keeps its place in that order (it is skipped when its turn comes).
The merge holds back what it cannot deliver yet; a partition holding `PAUSE_BYTES` undelivered is
paused until most of it is delivered.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from rft.config.connections import KafkaSettings
from rft.consumers.replay.partition_merge import Partition, PartitionMerge
from rft.errors import ConfigError, DecodeError, ReplayError
from rft.events.codec import EventCodec
from rft.events.reader import Envelope
from rft.events.transport import Record, RecordConsumer, TopicAdmin, kafka_backend

log = logging.getLogger(__name__)

# Seconds a read may make no progress while partitions remain before it gives up.
DEFAULT_STALL_TIMEOUT_S = 120.0
# Records fetched ahead of the reader: enough to keep the broker busy, small beside the
# client's defaults (bench/replay_export.py: 0.5 GiB peak with those, about 0.3 with this).
PREFETCH_BYTES = 32 << 20
# Undelivered bytes of one partition past which it is paused while the merge waits on another,
# and the level under which it is fetched again.
PAUSE_BYTES = PREFETCH_BYTES // 2
RESUME_BYTES = PAUSE_BYTES // 4


@dataclass(frozen=True)
class RangeBound:
    """A start or end point. `offsets` (partition -> offset) wins for the partitions it names;
    the other partitions use `timestamp_ms` when given, else their edge (the oldest record for a
    start, the last stable offset for an end). An end offset is exclusive."""

    offsets: Mapping[int, int] = field(default_factory=dict)
    timestamp_ms: int | None = None

    @property
    def open(self) -> bool:
        return not self.offsets and self.timestamp_ms is None


def parse_partition_offsets(text: str, option: str) -> dict[int, int]:
    """`0=120,3=7` -> {0: 120, 3: 7}; ConfigError naming `option` for anything else."""
    out: dict[int, int] = {}
    for item in (part.strip() for part in text.split(",")):
        partition, sep, offset = item.partition("=")
        try:
            if not sep:
                raise ValueError
            p, o = int(partition), int(offset)
            if p < 0 or o < 0:
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"{option}: {item!r} is not PARTITION=OFFSET (e.g. 0=120,3=7)"
            ) from None
        out[p] = o
    return out


def parse_timestamp(text: str, option: str) -> int:
    """Milliseconds since the epoch from an integer (ms) or an ISO 8601 time (UTC unless it
    names a zone); ConfigError naming `option` otherwise."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"{option}: {text!r} is neither milliseconds since the epoch nor an ISO 8601 time "
            "(e.g. 2026-03-01T12:00:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def resolve_spans(
    admin: TopicAdmin, topics: Sequence[str], start: RangeBound, end: RangeBound
) -> dict[Partition, tuple[int, int]]:
    """`[start, end)` offsets for every partition of `topics`, clamped to what each holds.

    A bound naming a partition the topics do not have is a ConfigError.
    """
    bounds = admin.partition_bounds(topics, committed=True)
    partitions = {b.partition for b in bounds}
    for name, bound in (("start", start), ("end", end)):
        unknown = sorted(set(bound.offsets) - partitions)
        if unknown:
            raise ConfigError(
                f"{name} offsets name partition(s) {unknown} that {', '.join(topics)} does not "
                f"have (partitions: {sorted(partitions)})"
            )
    start_times = (
        admin.offsets_for_timestamp(topics, start.timestamp_ms)
        if start.timestamp_ms is not None
        else {}
    )
    end_times = (
        admin.offsets_for_timestamp(topics, end.timestamp_ms)
        if end.timestamp_ms is not None
        else {}
    )
    spans: dict[Partition, tuple[int, int]] = {}
    for b in bounds:
        tp = (b.topic, b.partition)
        first = start.offsets.get(b.partition, start_times.get(tp, b.low))
        last = end.offsets.get(b.partition, end_times.get(tp, b.high))
        first = min(max(first, b.low), b.high)
        last = min(max(last, first), b.high)
        spans[tp] = (first, last)
    return spans


class RangeReader:
    """Reads `spans` of `topics` once, in batches of decoded envelopes, and stops at their ends.

    Events come in `PartitionMerge` order (by index in the span, then topic and partition), not
    in the order the partitions' fetches land: every read of one range delivers the same events
    in the same order, and a read resumed from saved offsets (`seek`) goes on in that order."""

    def __init__(
        self,
        consumer: RecordConsumer,
        spans: Mapping[Partition, tuple[int, int]],
        codec: EventCodec | None = None,
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
    ) -> None:
        self._consumer = consumer
        self.spans = dict(spans)
        self._codec = codec or EventCodec.default()
        self._stall_timeout_s = stall_timeout_s
        self._merge: PartitionMerge[Record] = PartitionMerge(self.spans)
        # stays what the consumer holds paused: it pauses again what a rebalance hands back
        self._paused: set[Partition] = set()
        self.undecodable: list[str] = []  # "topic[partition]@offset: error", in reading order
        # records fetched that the merge had already, or that lie outside the spans (before a
        # seek applied): work done twice, not events delivered twice
        self.refetched = 0
        # seconds spent polling since a poll last read or delivered anything: time between polls
        # (a trainer's step) is not a stall
        self._stalled_s = 0.0
        for (topic, partition), (first, _) in self.spans.items():
            consumer.seek(topic, partition, first)

    @classmethod
    def open(
        cls,
        kafka: KafkaSettings,
        topics: Sequence[str],
        start: RangeBound | None = None,
        end: RangeBound | None = None,
        *,
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
    ) -> RangeReader:
        """A reader of `topics` from `start` to `end` (default: all that is committed now)."""
        with kafka_backend(kafka).admin() as admin:
            spans = resolve_spans(admin, topics, start or RangeBound(), end or RangeBound())
        return cls.for_spans(kafka, spans, stall_timeout_s=stall_timeout_s)

    @classmethod
    def for_spans(
        cls,
        kafka: KafkaSettings,
        spans: Mapping[Partition, tuple[int, int]],
        *,
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
        config: Mapping[str, Any] | None = None,
    ) -> RangeReader:
        """A reader of `[start, end)` offset spans already known, over any topics (`config`:
        client settings, e.g. a longer max.poll.interval.ms for a reader that trains between
        polls)."""
        topics = sorted({topic for topic, _ in spans})
        group = f"rft-replay-{uuid.uuid4().hex[:12]}"  # never commits: leaves nothing behind
        consumer = kafka_backend(kafka).consumer(
            group, topics, from_beginning=True, config=config, prefetch_bytes=PREFETCH_BYTES
        )
        return cls(consumer, spans, stall_timeout_s=stall_timeout_s)

    @property
    def total(self) -> int:
        """Offsets in the spans: an upper bound on the events (transaction markers and aborted
        records take offsets too)."""
        return sum(end - start for start, end in self.spans.values())

    @property
    def done(self) -> int:
        """Offsets of the spans delivered so far."""
        return sum(self._merge.position(tp) - start for tp, (start, _) in self.spans.items())

    def _fetched(self) -> int:
        """Offsets of the spans read from the broker so far, delivered or buffered."""
        return sum(self._merge.fetched(tp) - start for tp, (start, _) in self.spans.items())

    @property
    def exhausted(self) -> bool:
        """Whether every event of the spans was delivered (every partition's position reached
        its span's end, and nothing is left buffered)."""
        return self._merge.exhausted

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read `topic[partition]` on from `offset` (inside its span: a resume point)."""
        tp = (topic, partition)
        first, end = self.spans[tp]
        offset = min(max(offset, first), end)
        self._merge.seek(tp, offset)
        self._consumer.seek(topic, partition, offset)
        if tp in self._paused:
            self._paused.discard(tp)
            self._consumer.resume([tp])

    def batches(self, max_events: int = 500) -> Iterator[list[Envelope]]:
        """Batches of the events in the spans, in merge order; ends when every event was
        delivered."""
        while not self.exhausted:
            batch = self.poll(max_events, 0.5)
            if batch:
                yield batch

    def poll(self, max_events: int = 500, timeout_s: float = 0.5) -> list[Envelope]:
        """One poll: up to `max_events` decoded events in merge order (possibly none, while the
        merge waits on a partition fetched more slowly). Raises ReplayError after
        `stall_timeout_s` without progress while events remain."""
        if self.exhausted:
            return []
        before = (self.done, self._fetched())
        started = time.monotonic()
        batch = self._deliver(max_events)
        # the consumer is polled even when the buffers fill the batch: its group expects polls
        wait = 0.0 if len(batch) >= max_events else timeout_s
        for r in self._consumer.poll(max_events, wait):
            size = len(r.value or b"") + len(r.key or b"")
            if not self._merge.add((r.topic, r.partition), r.offset, r, size):
                self.refetched += 1
        self._resume_handed_back()
        if len(batch) < max_events:
            # positions move past transaction markers and aborted records that no record shows
            for tp, position in self._consumer.positions().items():
                self._merge.moved(tp, position)
            batch += self._deliver(max_events - len(batch))
        self._bound_buffers()
        now = time.monotonic()
        moved = (self.done, self._fetched()) != before
        self._stalled_s = 0.0 if moved else self._stalled_s + (now - started)
        if self._stalled_s > self._stall_timeout_s:
            self._give_up()
        return batch

    def _resume_handed_back(self) -> None:
        """Partitions a rebalance took away (a poll interval overrun, a coordinator that moved)
        come back where their reading stands, not from the start: the group never commits, so
        without a seek the client would read them again from the oldest record (the merge would
        drop what it has, after fetching it all again)."""
        for topic, partition in sorted(self._consumer.take_revoked() & self.spans.keys()):
            # a partition read to its end is sought there too: nothing of it is fetched again
            self._consumer.seek(topic, partition, self._merge.fetched((topic, partition)))

    def _deliver(self, count: int) -> list[Envelope]:
        """Up to `count` events the merge can deliver now; undecodable records among them are
        logged and skipped in their place."""
        batch: list[Envelope] = []
        while len(batch) < count:
            taken = self._merge.take()
            if taken is None:
                break
            envelope = self._decoded(taken[2])
            if envelope is not None:
                batch.append(envelope)
        return batch

    def _decoded(self, r: Record) -> Envelope | None:
        try:
            if r.value is None:
                raise DecodeError("record has no value")
            event = self._codec.decode(r.value)
        except DecodeError as exc:
            self.undecodable.append(f"{r.topic}[{r.partition}]@{r.offset}: {exc}")
            log.warning("%s[%d]@%d: skipped: %s", r.topic, r.partition, r.offset, exc)
            return None
        return Envelope(event, r.topic, r.partition, r.offset, r.key, r.headers, r.timestamp_ms)

    def _bound_buffers(self) -> None:
        """Pause the partitions holding `PAUSE_BYTES` or more undelivered, resume those under
        `RESUME_BYTES`: while the merge waits on a slow partition the others are not read into
        memory without end (a partition it waits on has nothing buffered, so it is never
        paused)."""
        held = {tp: self._merge.buffered_bytes(tp) for tp in self.spans}
        pause = [tp for tp, n in held.items() if n >= PAUSE_BYTES and tp not in self._paused]
        resume = [tp for tp, n in held.items() if n < RESUME_BYTES and tp in self._paused]
        if pause:
            self._consumer.pause(pause)
            self._paused.update(pause)
        if resume:
            self._consumer.resume(resume)
            self._paused.difference_update(resume)

    def _give_up(self) -> None:
        merge = self._merge
        waiting = merge.waiting_on() or [tp for tp in self.spans if not merge.finished(tp)]
        where = ", ".join(
            f"{t}[{p}] at {merge.fetched((t, p))} of {self.spans[(t, p)][1]}" for t, p in waiting
        )
        raise ReplayError(
            f"no progress for {self._stall_timeout_s:.0f}s reading {where} "
            "(records deleted by retention, or a broker that stopped answering?)"
        )

    def close(self) -> None:
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
