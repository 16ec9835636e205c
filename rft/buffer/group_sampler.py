"""GroupSampler: the machinery every sample strategy shares.

Experiences are assembled into complete rollout groups; a group whose rewards are all equal is
filtered out when `filter_groups` is on (DAPO's dynamic sampling: such a group has zero advantage
and teaches nothing; it is counted and released, and batches wait for groups that do). Complete
groups wait in a pool: FIFO by arrival, or the priority replay buffer when
`experience_buffer.replay_buffer.enable`. A batch takes the pool's best groups until it holds at
least `train_batch_size` experiences (whole groups, so it may overshoot by less than one group),
judging staleness at that moment against the version the batch will train at: a group staler
than `max_staleness` is dropped, counted and released, and the batch keeps consuming.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rft.buffer.expert_source import ExpertSource
from rft.buffer.group_assembly import GroupAssembler
from rft.buffer.group_pool import FifoPool, GroupPool, PooledGroup
from rft.buffer.replay_buffer import ReplayBuffer, ReplaySettings
from rft.buffer.sampler import Admitted, BatchRow, SampledBatch, SamplerCounters
from rft.buffer.staleness import StalenessPolicy
from rft.errors import ConfigError

log = logging.getLogger(__name__)

STATE_FORMAT = 1


@dataclass(frozen=True)
class SamplerSetup:
    """What a sample strategy gets besides its own `sample_strategy_args`.

    replay: the replay buffer settings, or None for the FIFO pool.
    expert_sources: the auxiliary buffers by name (for `mix`).
    clock: wall-clock seconds, for replay cooldowns.
    """

    train_batch_size: int
    replay: ReplaySettings | None = None
    expert_sources: Mapping[str, ExpertSource] = field(default_factory=dict)
    clock: Callable[[], float] = time.time


def uniform_rewards(group: list[Admitted]) -> bool:
    """Whether every trajectory of a group has the same outcome, the reward of its last step
    (its group advantage is all zero). A single-turn experience is a trajectory of one step."""
    last: dict[str, tuple[int, float]] = {}
    for m in group:
        seen = last.get(m.exp.trajectory)
        if seen is None or m.exp.turn > seen[0]:
            last[m.exp.trajectory] = (m.exp.turn, m.exp.reward)
    return len({reward for _, reward in last.values()}) <= 1


class GroupSampler:
    """Whole groups from a FIFO or replay pool, staleness judged when the batch is formed."""

    def __init__(
        self,
        setup: SamplerSetup,
        *,
        max_staleness: int | None = None,
        filter_groups: bool = False,
    ) -> None:
        if setup.train_batch_size < 1:
            raise ConfigError(
                f"buffer.train_batch_size: must be >= 1, got {setup.train_batch_size}"
            )
        self.setup = setup
        self.counters = SamplerCounters()
        self.staleness = StalenessPolicy(max_staleness)
        self.filter_groups = filter_groups
        self.assembler = GroupAssembler()
        self.pool: GroupPool = (
            ReplayBuffer(setup.replay, self.counters)
            if setup.replay is not None
            else FifoPool(self.counters)
        )
        self._released: list[Admitted] = []
        self._deferred: list[list[Admitted]] = []  # complete groups read while restoring

    # -- Sampler --------------------------------------------------------------------------------

    def add(self, item: Admitted) -> None:
        claimed, given_up = self.pool.claim(item)
        self._released.extend(given_up)
        self._put_deferred()  # the restore may have finished with this item
        if claimed:
            return
        group = self.assembler.add(item)
        if group is None:
            return
        if self.filter_groups and uniform_rewards(group):
            self.counters.filtered_groups += 1
            self.counters.filtered_experiences += len(group)
            self._released.extend(group)
            return
        if self.pool.restoring:
            # restored groups come first, as they did before the restart
            self._deferred.append(group)
            return
        self._released.extend(self.pool.put(group, self.setup.clock()))

    def take_batch(self, version: int) -> SampledBatch | None:
        groups = self._choose_groups(version, self.setup.train_batch_size)
        if groups is None:
            return None
        return SampledBatch(self._use(groups), version, self.counters.copy())

    def release(self) -> list[Admitted]:
        out, self._released = self._released, []
        return out

    def waiting(self) -> tuple[int, int]:
        deferred = sum(len(g) for g in self._deferred)
        return self.assembler.pending_count, self.pool.waiting_count + deferred

    def state(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "counters": self.counters.as_dict(),
            "pool": self.pool.state(),
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        if not state:
            return
        if state.get("format") != STATE_FORMAT:
            raise ConfigError(f"sampler state format {state.get('format')!r} is not {STATE_FORMAT}")
        restored = SamplerCounters.from_dict(state.get("counters", {}))
        for name, value in restored.as_dict().items():
            setattr(self.counters, name, value)  # the pool holds this same object
        self.pool.restore(state.get("pool", {}))

    # -- pieces ---------------------------------------------------------------------------------

    def _choose_groups(self, version: int, target: int) -> list[PooledGroup] | None:
        """The pool's best groups adding up to >= `target` experiences (stale ones dropped on
        the way), or None, leaving them in the pool, while there are not enough."""
        if self.pool.restoring:
            return None
        chosen: list[PooledGroup] = []
        size = 0
        for group in self.pool.candidates(self.setup.clock()):
            if size >= target:
                break
            if not self.staleness.accepts(version, group.model_version):
                self._drop_stale(group, version)
                continue
            chosen.append(group)
            size += len(group)
        return chosen if size >= target else None

    def _drop_stale(self, group: PooledGroup, version: int) -> None:
        self.pool.drop(group)
        self.counters.dropped_stale += len(group)
        self._released.extend(group.members)
        first = group.members[0]
        log.info(
            "%s[%d]@%d: group %s of version %d is %d versions stale at version %d (max %s): "
            "dropped",
            first.tp[0],
            first.tp[1],
            first.offset,
            group.group_id,
            group.model_version,
            self.staleness.staleness(version, group.model_version),
            version,
            self.staleness.max_staleness,
        )

    def _use(self, groups: list[PooledGroup]) -> list[BatchRow]:
        now = self.setup.clock()
        rows: list[BatchRow] = []
        for group in groups:
            uses = group.use_count + 1
            rows.extend(BatchRow(m.exp, m, uses) for m in group.members)
            self.counters.learner_rows += len(group)
            if uses > 1:
                self.counters.replayed_rows += len(group)
            self._released.extend(self.pool.used(group, now))
        return rows

    def _put_deferred(self) -> None:
        if self.pool.restoring or not self._deferred:
            return
        deferred, self._deferred = self._deferred, []
        now = self.setup.clock()
        for group in deferred:
            self._released.extend(self.pool.put(group, now))
