"""GroupBatcher: assembles complete rollout groups into train batches of a fixed size.

GRPO needs every rollout of a task in the same batch, so experiences wait in a pending table until
their group is complete (`group_size` members), then move to a ready queue in arrival order. A batch
takes whole groups only; `train_batch_size` should be a multiple of the group size, otherwise the
batch is rounded to whole groups and may be slightly larger or smaller.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar


class Grouped(Protocol):
    @property
    def group_id(self) -> str: ...

    @property
    def group_size(self) -> int: ...


T = TypeVar("T", bound=Grouped)


@dataclass
class GroupBatcher(Generic[T]):
    train_batch_size: int
    pending: OrderedDict[str, list[T]] = field(default_factory=OrderedDict)
    ready: deque[list[T]] = field(default_factory=deque)

    def add(self, item: T) -> None:
        members = self.pending.setdefault(item.group_id, [])
        members.append(item)
        if len(members) >= item.group_size:
            self.ready.append(self.pending.pop(item.group_id))

    @property
    def ready_count(self) -> int:
        return sum(len(g) for g in self.ready)

    @property
    def pending_count(self) -> int:
        return sum(len(g) for g in self.pending.values())

    def take_batch(self) -> list[T] | None:
        """Whole groups adding up to at least `train_batch_size`, or None if not enough are ready."""
        if self.ready_count < self.train_batch_size:
            return None
        batch: list[T] = []
        while self.ready and len(batch) < self.train_batch_size:
            batch.extend(self.ready.popleft())
        return batch

    def flush_incomplete(self) -> list[list[T]]:
        """Hand back groups that never completed (e.g. at the end of a run) so they can be reported."""
        groups = list(self.pending.values())
        self.pending.clear()
        return groups
