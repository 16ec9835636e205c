"""OffsetLedger: the experience offsets a checkpoint may safely record as consumed.

The trainer polls experiences ahead of training them (groups wait to complete, batches wait to
fill). A checkpoint must not claim offsets of experiences it has not trained yet, or a resumed
trainer would skip them. So per partition the safe offset is the lowest offset still in flight, or
one past the highest offset seen when nothing is in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TopicPartition = tuple[str, int]


@dataclass
class OffsetLedger:
    in_flight: dict[TopicPartition, set[int]] = field(default_factory=dict)
    next_offset: dict[TopicPartition, int] = field(default_factory=dict)

    def start(self, tp: TopicPartition, next_offset: int) -> None:
        """Record where reading starts (e.g. a resume point), even before anything is polled."""
        self.next_offset.setdefault(tp, next_offset)

    def polled(self, tp: TopicPartition, offset: int) -> None:
        self.in_flight.setdefault(tp, set()).add(offset)
        self.next_offset[tp] = max(self.next_offset.get(tp, 0), offset + 1)

    def settled(self, tp: TopicPartition, offset: int) -> None:
        """The experience at `offset` was trained on or dropped by policy: it needs no re-read."""
        self.in_flight.get(tp, set()).discard(offset)

    def safe_offsets(self) -> dict[TopicPartition, int]:
        """Per partition, the offset a resumed reader should start from."""
        safe = {}
        for tp, nxt in self.next_offset.items():
            pending = self.in_flight.get(tp)
            safe[tp] = min(pending) if pending else nxt
        return safe
