"""The order a bounded read delivers its partitions' records in: one that depends on the data only.

A consumer hands out records of several partitions in whatever order their fetches land, so two
reads of one range would interleave the partitions differently (and an offline retrain would build
different batches from the same experiences). `PartitionMerge` buffers each partition's records
as they arrive and delivers them sorted by the key

    (offset - span start, topic, partition)

a total order of the records in the spans: the records at relative index 0 of every partition
(by topic and partition), then those at index 1, and so on. Offsets taken by transaction markers
and aborted records count in the index, so partitions advance in step by offsets, not by records.

A partition's head can be delivered once every other unfinished partition is known to hold
nothing smaller: its own buffered head is larger, or its position (the lowest offset a record not
yet buffered can have, moved on by records arriving and by the consumer's position past markers)
is past the head's index, or it reached its span's end. Until then the merge waits, whatever was
fetched meanwhile.

Because the order is a sort by a key of the records, a read that starts each partition at other
offsets inside the same spans (a resume: `seek`) delivers exactly the records of an uninterrupted
read from those offsets on, in the same order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Generic, TypeVar

Partition = tuple[str, int]
T = TypeVar("T")

# (index in the span, topic, partition): the order records are delivered in
MergeKey = tuple[int, str, int]


class PartitionMerge(Generic[T]):
    """Records of `[start, end)` offset spans in, the same records out in `MergeKey` order."""

    def __init__(self, spans: Mapping[Partition, tuple[int, int]]) -> None:
        self.spans = dict(spans)
        self._buffers: dict[Partition, deque[tuple[int, T, int]]] = {
            tp: deque() for tp in self.spans
        }
        self._bytes: dict[Partition, int] = dict.fromkeys(self.spans, 0)
        # the lowest offset a record not buffered yet can have
        self._next: dict[Partition, int] = {tp: start for tp, (start, _) in self.spans.items()}

    def seek(self, tp: Partition, offset: int) -> None:
        """Read `tp` from `offset` on (clamped to its span): what was buffered of it is dropped."""
        start, end = self.spans[tp]
        self._buffers[tp].clear()
        self._bytes[tp] = 0
        self._next[tp] = min(max(offset, start), end)

    def add(self, tp: Partition, offset: int, item: T, size: int = 0) -> bool:
        """Buffer the record at `offset` of `tp` (`size`: its bytes, for `buffered_bytes`).

        False, and nothing kept, for a partition outside the spans, an offset past its span's
        end, or one before its position (read already, or fetched before a seek applied)."""
        span = self.spans.get(tp)
        if span is None or not self._next[tp] <= offset < span[1]:
            return False
        self._buffers[tp].append((offset, item, size))
        self._bytes[tp] += size
        self._next[tp] = offset + 1
        return True

    def moved(self, tp: Partition, position: int) -> None:
        """The consumer reads `tp` next at `position`: no record before it is still to come
        (offsets it passed without a record were transaction markers or aborted records)."""
        span = self.spans.get(tp)
        if span is not None:
            self._next[tp] = max(self._next[tp], min(position, span[1]))

    def _floor(self, tp: Partition) -> MergeKey | None:
        """The smallest key `tp` can still deliver (its head's, or a bound from its position);
        None once it has nothing left."""
        start, end = self.spans[tp]
        buffer = self._buffers[tp]
        if buffer:
            return (buffer[0][0] - start, *tp)
        if self._next[tp] >= end:
            return None
        return (self._next[tp] - start, *tp)

    def take(self) -> tuple[Partition, int, T] | None:
        """The next record in merge order (partition, offset, item), or None while a partition
        with nothing buffered may still hold a smaller one (or nothing is left)."""
        floors = [(f, tp) for tp in self.spans if (f := self._floor(tp)) is not None]
        if not floors:
            return None
        _, tp = min(floors)
        buffer = self._buffers[tp]
        if not buffer:
            return None  # the smallest bound is a position: wait for that partition
        offset, item, size = buffer.popleft()
        self._bytes[tp] -= size
        return tp, offset, item

    def position(self, tp: Partition) -> int:
        """The offset of `tp` a resume would read from: its oldest undelivered record's, else
        where its reading stands."""
        buffer = self._buffers[tp]
        return buffer[0][0] if buffer else self._next[tp]

    def fetched(self, tp: Partition) -> int:
        """Where reading `tp` stands: past every record buffered or delivered of it."""
        return self._next[tp]

    def buffered(self, tp: Partition) -> int:
        return len(self._buffers[tp])

    def buffered_bytes(self, tp: Partition) -> int:
        return self._bytes[tp]

    def finished(self, tp: Partition) -> bool:
        """Whether `tp` delivered all of its span."""
        return self._floor(tp) is None

    @property
    def exhausted(self) -> bool:
        """Whether every record of every span was delivered."""
        return all(self.finished(tp) for tp in self.spans)

    def waiting_on(self) -> list[Partition]:
        """The partitions not finished and with nothing buffered: the ones a stalled merge waits
        for."""
        return [tp for tp in self.spans if not self._buffers[tp] and not self.finished(tp)]
