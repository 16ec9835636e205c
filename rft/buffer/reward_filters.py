"""The experience operators that drop experiences by their rewards: `reward_std_filter` (whole
rollout groups whose rewards barely differ) and `invalid_reward_filter` (non-finite rewards).

What they drop is counted in their metrics (`dropped`), and the pipeline counts it again from
the lengths in and out, so the step's metrics always say it.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from rft.buffer.experience_operators import ExperienceBatch, OperatorResult
from rft.errors import ConfigError
from rft.events.models import Experience


def reward_std_filter(experiences: ExperienceBatch, threshold: float = 0.0) -> OperatorResult:
    """Keep the rollout groups (experiences sharing a group_id) whose reward standard deviation
    exceeds `threshold`; a group with one experience in the batch has none and is dropped.

    With all rewards of a group equal, GRPO-style advantages are all zero: such a group costs a
    forward and backward pass and teaches nothing. Metrics: dropped experiences and groups, and
    the groups kept."""
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or threshold < 0:
        raise ConfigError(f"reward_std_filter.threshold: must be a number >= 0, got {threshold!r}")
    groups: dict[str, list[Experience]] = defaultdict(list)
    for exp in experiences:
        groups[exp.group_id].append(exp)
    spread = {
        group: len(members) > 1 and float(np.std([e.reward for e in members])) > threshold
        for group, members in groups.items()
    }
    kept = [exp for exp in experiences if spread[exp.group_id]]
    return kept, {
        "dropped": float(len(experiences) - len(kept)),
        "dropped_groups": float(sum(not s for s in spread.values())),
        "kept_groups": float(sum(spread.values())),
    }


def invalid_reward_filter(experiences: ExperienceBatch) -> OperatorResult:
    """Drop experiences whose reward is NaN or infinite (a reward function that divided by zero,
    a judge that answered nothing): one such reward would make the whole step's loss NaN."""
    kept = [exp for exp in experiences if math.isfinite(exp.reward)]
    return kept, {"dropped": float(len(experiences) - len(kept))}
