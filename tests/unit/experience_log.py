"""A stand-in experience topic for sampler tests: rollout groups as Admitted items with offsets.

The samplers never touch Kafka; they see (experience, partition, offset) triples, so a list of
them is what the trainer's reader would hand over. Integration tests use the real topic.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rft.buffer.sampler import Admitted
from rft.events.models import Experience

TOPIC = "run.experiences"


def experience(group: str, size: int, member: int, version: int, reward: float) -> Experience:
    return Experience(
        experience_id=f"{group}/{member}",
        task_id=group,
        group_id=group,
        group_size=size,
        explorer_id="e",
        model_version=version,
        prompt_ids=np.array([1, 2], dtype=np.int32),
        response_ids=np.array([3, 4, 5], dtype=np.int32),
        logprobs=np.zeros(3, dtype=np.float32),
        reward=reward,
    )


@dataclass(frozen=True)
class GroupSpec:
    size: int
    version: int
    rewards: tuple[float, ...]


def write_log(
    groups: Sequence[GroupSpec], partitions: int = 1, rnd: random.Random | None = None
) -> list[Admitted]:
    """Each group's members go to one partition (keyed by task, as explorers write them); the
    members of different groups interleave when `rnd` is given. Offsets count per partition."""
    members = [(i, k, g) for i, g in enumerate(groups) for k in range(g.size)]
    if rnd is not None:
        members = _interleave(members, rnd)
    next_offset = [0] * partitions
    log = []
    for i, k, g in members:
        p = i % partitions
        exp = experience(f"g{i}", g.size, k, g.version, g.rewards[k])
        log.append(Admitted(exp, (TOPIC, p), next_offset[p]))
        next_offset[p] += 1
    return log


def _interleave(members: list[tuple[int, int, GroupSpec]], rnd: random.Random) -> list:
    """A random merge of the groups' member sequences (each group keeps its own order)."""
    queues: dict[int, list] = {}
    for m in members:
        queues.setdefault(m[0], []).append(m)
    out = []
    while queues:
        i = rnd.choice(sorted(queues))
        out.append(queues[i].pop(0))
        if not queues[i]:
            del queues[i]
    return out
