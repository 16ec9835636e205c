"""The experience operators that drop experiences by their rewards: `reward_filter` (rewards
below a threshold), `reward_std_filter` (whole rollout groups whose rewards barely differ),
`dapo_dynamic_sampling` (whole groups all right or all wrong) and `invalid_reward_filter`
(non-finite rewards).

What they drop is counted in their metrics (`dropped`), and the pipeline counts it again from
the lengths in and out, so the step's metrics always say it.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from rft.buffer.experience_operators import ExperienceBatch, OperatorResult, experience_stat
from rft.errors import ConfigError
from rft.events.models import Experience


def reward_filter(experiences: ExperienceBatch, threshold: float = 0.0) -> OperatorResult:
    """Keep the experiences whose reward is >= `threshold` (a NaN reward is not)."""
    kept = [exp for exp in experiences if exp.reward >= threshold]
    return kept, {"dropped": float(len(experiences) - len(kept))}


def _groups(experiences: ExperienceBatch) -> dict[str, list[Experience]]:
    groups: dict[str, list[Experience]] = defaultdict(list)
    for exp in experiences:
        groups[exp.group_id].append(exp)
    return groups


def dapo_dynamic_sampling(
    experiences: ExperienceBatch, metric_key: str = "accuracy", correct_threshold: float = 0.0
) -> OperatorResult:
    """DAPO's dynamic sampling on the batch: keep a rollout group only when some but not all of
    its experiences are correct, correct meaning a score above `correct_threshold`; the score is
    the experience's statistic `metric_key` (a metric, or reward info read as a number, such as
    the math rewards' `accuracy`), else its reward. A group with one experience in the batch is
    all right or all wrong, so it is dropped. Metrics: dropped, dropped_all_correct, dropped_all_wrong (experiences)."""
    kept_groups: set[str] = set()
    all_correct = all_wrong = 0
    for group, members in _groups(experiences).items():
        scores = [experience_stat(e, metric_key) for e in members]
        correct = sum(
            (e.reward if s is None else s) > correct_threshold
            for e, s in zip(members, scores, strict=True)
        )
        if correct == len(members):
            all_correct += len(members)
        elif correct == 0:
            all_wrong += len(members)
        else:
            kept_groups.add(group)
    kept = [exp for exp in experiences if exp.group_id in kept_groups]
    return kept, {
        "dropped": float(len(experiences) - len(kept)),
        "dropped_all_correct": float(all_correct),
        "dropped_all_wrong": float(all_wrong),
    }


def reward_std_filter(experiences: ExperienceBatch, threshold: float = 0.0) -> OperatorResult:
    """Keep the rollout groups (experiences sharing a group_id) whose reward standard deviation
    exceeds `threshold`; a group with one experience in the batch has none and is dropped.

    With all rewards of a group equal, GRPO-style advantages are all zero: such a group costs a
    forward and backward pass and teaches nothing. Metrics: dropped experiences and groups, and
    the groups kept."""
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or threshold < 0:
        raise ConfigError(f"reward_std_filter.threshold: must be a number >= 0, got {threshold!r}")
    spread = {
        group: len(members) > 1 and float(np.std([e.reward for e in members])) > threshold
        for group, members in _groups(experiences).items()
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
