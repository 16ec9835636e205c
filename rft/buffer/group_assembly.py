"""GroupAssembler: collects experiences until their rollout group is complete.

GRPO-style advantages compare the rollouts of one task, so every sampler trains whole groups.
Experiences wait in a pending table until `group_size` members have arrived; the complete group is
then handed on in arrival order. A group that never completes (its explorer died before
committing the rest) stays pending, in flight for the offset ledger, and is reported at stop.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from rft.buffer.sampler import Admitted


@dataclass
class GroupAssembler:
    pending: OrderedDict[str, list[Admitted]] = field(default_factory=OrderedDict)

    def add(self, item: Admitted) -> list[Admitted] | None:
        """Add one experience; its group when this completed it, else None."""
        members = self.pending.setdefault(item.group_id, [])
        members.append(item)
        if len(members) >= item.group_size:
            return self.pending.pop(item.group_id)
        return None

    @property
    def pending_count(self) -> int:
        return sum(len(g) for g in self.pending.values())
