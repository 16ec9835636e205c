"""Where complete rollout groups wait to be trained: the GroupPool protocol and the FIFO pool.

A pool orders the groups a sampler may put in the next batch (`candidates`), forgets the ones the
sampler drops (`drop`), and decides what happens after a group is trained (`used`): the FIFO pool
lets it go; the replay buffer (`rft.buffer.replay_buffer`) may keep it for reuse. What a pool lets
go is returned so the sampler can release it to the offset ledger.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rft.buffer.sampler import Admitted, SamplerCounters


@dataclass(eq=False)  # a group is itself, whatever its fields say
class PooledGroup:
    """A complete rollout group in a pool.

    model_version: the oldest version among its members (staleness is judged on it).
    size: its experiences (members may still be read again after a restore).
    use_count: times trained so far; ready_at: wall-clock time (s) it may be trained again;
    seq: arrival number (ties in priority go to the earlier group); priority: replay priority.
    """

    members: list[Admitted]
    group_id: str
    model_version: int
    seq: int
    size: int = 0
    use_count: int = 0
    ready_at: float = 0.0
    priority: float = 0.0

    @classmethod
    def of(cls, members: list[Admitted], seq: int) -> PooledGroup:
        return cls(
            members=members,
            group_id=members[0].group_id,
            model_version=min(m.exp.model_version for m in members),
            seq=seq,
            size=len(members),
        )

    def __len__(self) -> int:
        return self.size


class GroupPool(Protocol):
    def put(self, members: list[Admitted], now: float) -> list[Admitted]:
        """Add a complete group; returns what the pool let go to make room (or refused)."""

    def candidates(self, now: float) -> list[PooledGroup]:
        """Groups that may be trained now, best first."""

    def drop(self, group: PooledGroup) -> None:
        """Forget `group` without training it (the caller releases its members)."""

    def used(self, group: PooledGroup, now: float) -> list[Admitted]:
        """`group` was just trained; returns its members if the pool lets it go."""

    def claim(self, item: Admitted) -> tuple[bool, list[Admitted]]:
        """After a restore: (whether `item` belongs to a restored group, members given up)."""

    @property
    def restoring(self) -> bool:
        """Restored groups still wait for members to be read again."""

    @property
    def waiting_count(self) -> int:
        """Experiences held."""

    def state(self) -> dict[str, Any]: ...

    def restore(self, state: Mapping[str, Any]) -> None: ...


class FifoPool:
    """Complete groups in arrival order; each is trained once and then let go."""

    def __init__(self, counters: SamplerCounters) -> None:
        self.counters = counters
        self.groups: deque[PooledGroup] = deque()
        self._seq = 0

    def put(self, members: list[Admitted], now: float) -> list[Admitted]:
        self.groups.append(PooledGroup.of(members, self._seq))
        self._seq += 1
        return []

    def candidates(self, now: float) -> list[PooledGroup]:
        return list(self.groups)

    def drop(self, group: PooledGroup) -> None:
        self.groups.remove(group)

    def used(self, group: PooledGroup, now: float) -> list[Admitted]:
        self.groups.remove(group)
        group.use_count += 1
        return group.members

    def claim(self, item: Admitted) -> tuple[bool, list[Admitted]]:
        return False, []

    @property
    def restoring(self) -> bool:
        return False

    @property
    def waiting_count(self) -> int:
        return sum(len(g) for g in self.groups)

    def state(self) -> dict[str, Any]:
        # untrained groups are in flight for the ledger: a restarted trainer reads them again
        return {}

    def restore(self, state: Mapping[str, Any]) -> None:
        return None
