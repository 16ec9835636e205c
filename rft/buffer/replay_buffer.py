"""ReplayBuffer: a pool that trains the highest-priority groups first and may train them again.

Trinity-RFT's `experience_buffer.replay_buffer` with its keys:
- every complete group gets `priority_fn(model_version, use_count=0, noise)`; one whose `keep` is
  False is not admitted;
- `candidates` are the groups whose cooldown has passed, highest priority first (ties: earlier
  arrival first);
- after a group is trained its use count goes up by one and the priority is computed again. With
  `reuse_cooldown_time` None, or `keep` False, the group leaves (retired); otherwise it may be
  trained again `reuse_cooldown_time` seconds later. Cooling groups stay in the buffer;
- `capacity` bounds the experiences held. A group that does not fit evicts the lowest-priority
  groups (ties: the earliest) while their priority is at most its own; if one is higher it is
  refused instead.

Durability: the buffer saves each group as the log positions of its members plus use count,
cooldown, priority and arrival number (`state`). A restarted trainer reads the log again from
before the oldest held group (its members stay in flight for the offset ledger), and `claim` puts
each member read back into its restored group; until every restored group is whole the buffer
offers no candidates, so batches continue as they would have.
"""

from __future__ import annotations

import heapq
import logging
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rft.buffer.group_pool import PooledGroup
from rft.buffer.priority_fns import PRIORITY_FNS, PriorityFn
from rft.buffer.sampler import Admitted, SamplerCounters
from rft.config.schema import ExperienceBufferConfig
from rft.errors import ConfigError

log = logging.getLogger(__name__)

STATE_FORMAT = 1


@dataclass(frozen=True)
class ReplaySettings:
    """The replay_buffer keys, resolved (`capacity` from experience_buffer.capacity)."""

    capacity: int
    reuse_cooldown_time: float | None = None
    priority_fn: str = "linear_decay"
    priority_fn_args: Mapping[str, Any] = field(default_factory=dict)

    def allows_uses(self, model_version: int, group_id: str, times: int) -> bool:
        """Whether a buffer under these settings can train the group `group_id` (generated on
        `model_version`, its oldest member's) `times` times: after each use it goes back for
        reuse only with a cooldown and while the priority fn keeps it (`ReplayBuffer.used`)."""
        if times <= 1:
            return True
        if self.reuse_cooldown_time is None:
            return False
        fn = PRIORITY_FNS.get(self.priority_fn)
        return all(
            group_priority(fn, self.priority_fn_args, group_id, model_version, use)[1]
            for use in range(1, times)
        )


def replay_settings(buffer: ExperienceBufferConfig) -> ReplaySettings | None:
    """The replay settings of `buffer.trainer_input.experience_buffer`, or None when
    `replay_buffer.enable` is off."""
    replay = buffer.replay_buffer
    if not replay.enable:
        return None
    return ReplaySettings(
        capacity=buffer.capacity,
        reuse_cooldown_time=replay.reuse_cooldown_time,
        priority_fn=replay.priority_fn,
        priority_fn_args=dict(replay.priority_fn_args),
    )


def group_priority(
    fn: PriorityFn, args: Mapping[str, Any], group_id: str, model_version: int, use_count: int
) -> tuple[float, bool]:
    """(priority, keep) of a group at a use count, with its seeded noise."""
    noise = replay_noise(group_id, use_count)
    priority, keep = fn(model_version, use_count, noise, **args)
    return float(priority), bool(keep)


def replay_noise(group_id: str, use_count: int) -> float:
    """The standard-normal draw for a group at a use count: the same after a restart."""
    seed = [zlib.crc32(group_id.encode("utf-8")), use_count]
    return float(np.random.default_rng(seed).standard_normal())


@dataclass(eq=False)
class _Restoring:
    """A restored group whose members are being read again."""

    group: PooledGroup
    keys: list[tuple[str, int, int]]  # members' (topic, partition, offset), in group order
    found: dict[tuple[str, int, int], Admitted] = field(default_factory=dict)


class ReplayBuffer:
    def __init__(self, settings: ReplaySettings, counters: SamplerCounters) -> None:
        if settings.capacity < 1:
            raise ConfigError(
                f"buffer.trainer_input.experience_buffer.capacity: must be >= 1, got "
                f"{settings.capacity}"
            )
        self.settings = settings
        self.counters = counters
        self._fn = PRIORITY_FNS.get(settings.priority_fn)
        self._args = dict(settings.priority_fn_args)
        self.groups: list[PooledGroup] = []
        self._held = 0  # experiences in self.groups
        self._restoring: set[_Restoring] = set()
        self._by_key: dict[tuple[str, int, int], _Restoring] = {}
        # per partition, the offsets of members still to be read again (smallest first)
        self._missing: dict[tuple[str, int], list[tuple[int, int]]] = {}
        self._seq = 0

    # -- priorities -----------------------------------------------------------------------------

    def _priority(self, group: PooledGroup) -> tuple[float, bool]:
        return group_priority(
            self._fn, self._args, group.group_id, group.model_version, group.use_count
        )

    # -- GroupPool ------------------------------------------------------------------------------

    def put(self, members: list[Admitted], now: float) -> list[Admitted]:
        group = PooledGroup.of(members, self._seq)
        self._seq += 1
        group.priority, keep = self._priority(group)
        if not keep:
            self.counters.retired += len(group)
            return list(members)
        let_go: list[Admitted] = []
        while self.waiting_count + len(group) > self.settings.capacity and self.groups:
            lowest = min(self.groups, key=lambda g: (g.priority, g.seq))
            if lowest.priority > group.priority:
                self.counters.rejected += len(group)
                return let_go + list(members)
            self._remove(lowest)
            self.counters.evicted += len(lowest)
            let_go.extend(lowest.members)
        if self.waiting_count + len(group) > self.settings.capacity:
            # a group larger than the whole buffer (capacity is checked against the batch size
            # at load, so only a group bigger than a batch gets here)
            self.counters.rejected += len(group)
            return let_go + list(members)
        self._add(group)
        return let_go

    def candidates(self, now: float) -> list[PooledGroup]:
        if self._restoring:
            return []
        ready = [g for g in self.groups if g.ready_at <= now]
        return sorted(ready, key=lambda g: (-g.priority, g.seq))

    def drop(self, group: PooledGroup) -> None:
        self._remove(group)

    def used(self, group: PooledGroup, now: float) -> list[Admitted]:
        group.use_count += 1
        group.priority, keep = self._priority(group)
        cooldown = self.settings.reuse_cooldown_time
        if cooldown is None or not keep:
            self._remove(group)
            self.counters.retired += len(group)
            return group.members
        group.ready_at = now + cooldown
        return []

    @property
    def restoring(self) -> bool:
        return bool(self._restoring)

    @property
    def waiting_count(self) -> int:
        return self._held

    def _add(self, group: PooledGroup) -> None:
        self.groups.append(group)
        self._held += len(group)

    def _remove(self, group: PooledGroup) -> None:
        self.groups.remove(group)
        self._held -= len(group)

    def claim(self, item: Admitted) -> tuple[bool, list[Admitted]]:
        if not self._restoring:
            return False, []
        entry = self._by_key.pop(item.key, None)
        if entry is not None:
            entry.found[item.key] = item
        given_up = self._give_up_before(item)
        if entry is not None and entry in self._restoring and len(entry.found) == len(entry.keys):
            entry.group.members = [entry.found[k] for k in entry.keys]
            self._restoring.remove(entry)
        return entry is not None, given_up

    def _give_up_before(self, item: Admitted) -> list[Admitted]:
        """Restored groups with a member before `item` on its partition that was not read:
        partitions are read in order, so it is no longer on the topic."""
        missing = self._missing.get(item.tp, [])
        given_up: list[Admitted] = []
        while missing and missing[0][0] < item.offset:
            offset, _ = heapq.heappop(missing)
            entry = self._by_key.get((item.tp[0], item.tp[1], offset))
            if entry is None:
                continue  # read in the meantime, or its group was given up already
            log.warning(
                "replay group %s: its member %s[%d]@%d is no longer on the experience topic; "
                "the group is given up (use count %d)",
                entry.group.group_id,
                item.tp[0],
                item.tp[1],
                offset,
                entry.group.use_count,
            )
            self._restoring.remove(entry)
            self._remove(entry.group)
            for k in entry.keys:
                self._by_key.pop(k, None)
            self.counters.evicted += len(entry.found)
            given_up.extend(entry.found.values())
        return given_up

    # -- durability -----------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "next_seq": self._seq,
            "groups": [
                {
                    "group_id": g.group_id,
                    "members": [list(m.key) for m in g.members],
                    "model_version": g.model_version,
                    "use_count": g.use_count,
                    "ready_at": g.ready_at,
                    "priority": g.priority,
                    "seq": g.seq,
                }
                for g in self.groups
            ],
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        if not state:
            return
        if state.get("format") != STATE_FORMAT:
            raise ConfigError(
                f"replay buffer state format {state.get('format')!r} is not {STATE_FORMAT}"
            )
        self._seq = int(state["next_seq"])
        for saved in state["groups"]:
            group = PooledGroup(
                members=[],
                group_id=str(saved["group_id"]),
                model_version=int(saved["model_version"]),
                seq=int(saved["seq"]),
                use_count=int(saved["use_count"]),
                ready_at=float(saved["ready_at"]),
                priority=float(saved["priority"]),
            )
            keys = [(str(t), int(p), int(o)) for t, p, o in saved["members"]]
            group.size = len(keys)
            entry = _Restoring(group, keys)
            self._add(group)
            self._restoring.add(entry)
            for k in keys:
                self._by_key[k] = entry
                heapq.heappush(self._missing.setdefault((k[0], k[1]), []), (k[2], id(entry)))
