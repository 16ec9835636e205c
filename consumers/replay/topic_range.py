"""Bounded reads of topics: every committed event between a start and an end point, then stop.

A `RangeBound` says where a read starts or ends: offsets per partition, a timestamp, or (neither)
the partition's edge. `resolve_spans` turns a start and an end bound into one `[start, end)`
offset span per partition, against the broker's offsets at that moment: the default end is the
last stable offset, so a read never waits for a transaction that is still open, and events written
after the read began are left out. `RangeReader` reads the spans as a throwaway consumer group
that never commits. An undecodable record is counted and skipped (a read-only tool parks nothing).
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
from rft.errors import ConfigError, DecodeError, ReplayError
from rft.events.codec import EventCodec
from rft.events.reader import Envelope
from rft.events.transport import RecordConsumer, TopicAdmin, kafka_backend

log = logging.getLogger(__name__)

Partition = tuple[str, int]

# Seconds a read may make no progress while partitions remain before it gives up.
DEFAULT_STALL_TIMEOUT_S = 120.0
# Records fetched ahead of the reader: enough to keep the broker busy, small beside the
# client's defaults (bench/replay_export.py: 0.5 GiB peak with those, about 0.3 with this).
PREFETCH_BYTES = 32 << 20


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
    """Reads `spans` of `topics` once, in batches of decoded envelopes, and stops at their ends."""

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
        self._reached: dict[Partition, int] = {tp: start for tp, (start, _) in self.spans.items()}
        self.undecodable: list[str] = []  # "topic[partition]@offset: error", in reading order
        # seconds spent polling since a poll last moved a position: time between polls (a
        # trainer's step) is not a stall
        self._stalled_s = 0.0
        self._last_check = 0.0
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
        """Offsets of the spans read so far."""
        return sum(min(self._reached[tp], end) - start for tp, (start, end) in self.spans.items())

    def _pending(self) -> list[Partition]:
        return [tp for tp, (_, end) in self.spans.items() if self._reached[tp] < end]

    @property
    def exhausted(self) -> bool:
        """Whether every partition's position has reached its span's end."""
        return not self._pending()

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read `topic[partition]` on from `offset` (inside its span: a resume point)."""
        tp = (topic, partition)
        first, end = self.spans[tp]
        offset = min(max(offset, first), end)
        self._reached[tp] = offset
        self._consumer.seek(topic, partition, offset)

    def batches(self, max_events: int = 500) -> Iterator[list[Envelope]]:
        """Batches of the events in the spans, in each partition's order; ends when every
        partition's position has reached its span's end."""
        while not self.exhausted:
            batch = self.poll(max_events, 0.5)
            if batch:
                yield batch

    def poll(self, max_events: int = 500, timeout_s: float = 0.5) -> list[Envelope]:
        """One poll: the decoded events in the spans (possibly none). Raises ReplayError after
        `stall_timeout_s` without progress while partitions remain."""
        if self.exhausted:
            return []
        decode = self._codec.decode
        before = self.done
        started = time.monotonic()
        records = self._consumer.poll(max_events, timeout_s)
        batch: list[Envelope] = []
        for r in records:
            tp = (r.topic, r.partition)
            span = self.spans.get(tp)
            if span is None or not self._reached[tp] <= r.offset < span[1]:
                continue  # a partition's records past its end, or before a seek applied
            self._reached[tp] = max(self._reached[tp], r.offset + 1)
            try:
                if r.value is None:
                    raise DecodeError("record has no value")
                event = decode(r.value)
            except DecodeError as exc:
                self.undecodable.append(f"{r.topic}[{r.partition}]@{r.offset}: {exc}")
                log.warning("%s[%d]@%d: skipped: %s", r.topic, r.partition, r.offset, exc)
                continue
            batch.append(
                Envelope(event, r.topic, r.partition, r.offset, r.key, r.headers, r.timestamp_ms)
            )
        now = time.monotonic()
        if not records or now - self._last_check > 1.0:
            # positions move past transaction markers and aborted records that no record shows
            self._last_check = now
            for tp, position in self._consumer.positions().items():
                if tp in self._reached and position > self._reached[tp]:
                    self._reached[tp] = position
        self._stalled_s = 0.0 if self.done > before else self._stalled_s + (now - started)
        if self._stalled_s > self._stall_timeout_s:
            where = ", ".join(
                f"{t}[{p}] at {self._reached[(t, p)]} of {self.spans[(t, p)][1]}"
                for t, p in self._pending()
            )
            raise ReplayError(
                f"no progress for {self._stall_timeout_s:.0f}s reading {where} "
                "(records deleted by retention, or a broker that stopped answering?)"
            )
        return batch

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
