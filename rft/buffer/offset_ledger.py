"""OffsetLedger: the experience offsets a checkpoint may record as consumed, and those to skip.

The trainer polls experiences ahead of training them (groups wait to complete, batches wait to
fill, the replay buffer keeps groups for reuse). An experience is *settled* once the sampler will
never hand it out again: trained and not kept for replay, dropped as stale, filtered, evicted or
retired by the replay buffer (or not an experience at all). Everything else is in flight. Per
partition the resume offset is the lowest offset in flight, or one past the highest offset seen
when nothing is: a restarted trainer reads every unsettled experience again (the replay buffer
rebuilds itself from them). Offsets already settled past the resume point are recorded too
(`settled_ahead`), and a ledger started with them (`start(..., skip=...)`) reports them as
settled when they are read again, so nothing is trained twice.

Below each partition's floor (the resume point it started from, raised each time the settled
offsets behind the resume point are forgotten) every offset not in flight is settled: a reader
put back behind it (a rebalance after an outage hands the partition back at the group's older
committed offset) finds them skipped, not trained again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]


@dataclass
class OffsetLedger:
    in_flight: dict[TopicPartition, set[int]] = field(default_factory=dict)
    next_offset: dict[TopicPartition, int] = field(default_factory=dict)
    ahead: dict[TopicPartition, set[int]] = field(default_factory=dict)
    floor: dict[TopicPartition, int] = field(default_factory=dict)

    def start(self, tp: TopicPartition, next_offset: int, skip: Iterable[int] = ()) -> None:
        """Record where reading starts (a resume point) and the offsets past it already settled."""
        self.next_offset.setdefault(tp, next_offset)
        self.floor[tp] = max(self.floor.get(tp, 0), next_offset)
        self.ahead.setdefault(tp, set()).update(o for o in skip if o >= next_offset)

    def polled(self, tp: TopicPartition, offset: int) -> bool:
        """Record a read; False when the offset was settled before, or is read again while it
        still waits in the sampler (a rebalance after an outage puts the reader back at the
        group's last commit): skip it."""
        self.next_offset[tp] = max(self.next_offset.get(tp, 0), offset + 1)
        if offset in self.in_flight.get(tp, ()):
            return False
        if offset < self.floor.get(tp, 0) or offset in self.ahead.get(tp, ()):
            return False
        self.in_flight.setdefault(tp, set()).add(offset)
        return True

    def settled(self, tp: TopicPartition, offset: int) -> None:
        """The sampler let the experience at `offset` go: it needs no re-read."""
        pending = self.in_flight.get(tp)
        if pending is not None:
            pending.discard(offset)
        self.ahead.setdefault(tp, set()).add(offset)

    def safe_offsets(self) -> dict[TopicPartition, int]:
        """Per partition, the offset a resumed reader should start from."""
        safe = {}
        for tp, nxt in self.next_offset.items():
            pending = self.in_flight.get(tp)
            safe[tp] = min(pending) if pending else nxt
        return safe

    def settled_ahead(self) -> dict[TopicPartition, list[int]]:
        """Per partition, the settled offsets at or past the resume point (older ones dropped)."""
        out = {}
        for tp, resume in self.safe_offsets().items():
            kept = {o for o in self.ahead.get(tp, ()) if o >= resume}
            self.ahead[tp] = kept
            self.floor[tp] = max(self.floor.get(tp, 0), resume)
            if kept:
                out[tp] = sorted(kept)
        return out


def to_ranges(offsets: list[int]) -> list[list[int]]:
    """Sorted offsets as [first, last] runs, for a compact saved state."""
    runs: list[list[int]] = []
    for o in offsets:
        if runs and o == runs[-1][1] + 1:
            runs[-1][1] = o
        else:
            runs.append([o, o])
    return runs


def from_ranges(runs: Iterable[Iterable[int]]) -> list[int]:
    out: list[int] = []
    for first, last in runs:
        out.extend(range(int(first), int(last) + 1))
    return out
