"""GroupAssembler: collects experiences until their rollout group is complete.

GRPO-style advantages compare the rollouts of one task, so every sampler trains whole groups.
A group is `group_size` trajectories; a trajectory is complete when all `turn_count` of its step
experiences have arrived (a single-turn or concatenated experience is a whole trajectory: one
step). Experiences wait in a pending table until every trajectory of their group is complete; the
group is then handed on in arrival order. A group that never completes (its explorer died before
committing the rest) stays pending, in flight for the offset ledger, and is reported at stop.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from rft.buffer.sampler import Admitted


@dataclass
class PendingGroup:
    """The members of one group read so far, with the steps read of each trajectory."""

    members: list[Admitted] = field(default_factory=list)
    steps: dict[str, int] = field(default_factory=dict)
    complete_trajectories: int = 0

    def add(self, item: Admitted) -> None:
        self.members.append(item)
        trajectory = item.exp.trajectory
        seen = self.steps.get(trajectory, 0) + 1
        self.steps[trajectory] = seen
        if seen == item.exp.turn_count:
            self.complete_trajectories += 1


@dataclass
class GroupAssembler:
    pending: OrderedDict[str, PendingGroup] = field(default_factory=OrderedDict)

    def add(self, item: Admitted) -> list[Admitted] | None:
        """Add one experience; its group when this completed it, else None."""
        group = self.pending.setdefault(item.group_id, PendingGroup())
        group.add(item)
        if group.complete_trajectories >= item.group_size:
            return self.pending.pop(item.group_id).members
        return None

    @property
    def pending_count(self) -> int:
        return sum(len(g.members) for g in self.pending.values())
