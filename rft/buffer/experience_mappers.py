"""The experience operators that change or measure experiences and drop none:
`mask_response_truncated`, `reward_shaping_mapper` and `pass_rate_calculator`.

Experiences are immutable: a changed one is a copy (`dataclasses.replace`), so the decoded events
the sampler holds (and may replay) keep what the log says.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rft.buffer.experience_operators import ExperienceBatch, OperatorResult, experience_stat
from rft.config.binding import Issue
from rft.errors import ConfigError

SHAPING_OPS = ("ADD", "SUB", "MUL", "DIV")
_SHAPING_KEYS = ("stats_key", "op_type", "weight")


def mask_response_truncated(experiences: ExperienceBatch) -> OperatorResult:
    """Zero the action mask of every experience whose response was cut at the length limit
    (`truncated`), so it adds nothing to the loss (DAPO's overlong filtering); its reward still
    counts in its group's advantages. Metrics: masked (experiences masked)."""
    out = []
    masked = 0
    for exp in experiences:
        if exp.truncated:
            zeros = np.zeros(exp.response_length, dtype=np.bool_)
            exp = dataclasses.replace(exp, action_mask=zeros)
            masked += 1
        out.append(exp)
    return out, {"masked": float(masked)}


def reward_shaping_mapper(
    experiences: ExperienceBatch, reward_shaping_configs: Sequence[Mapping[str, Any]] = ()
) -> OperatorResult:
    """Reshape each reward by the experience's own statistics, one rule after another:
    `reward <op> weight * stat`, op one of ADD, SUB, MUL, DIV (Trinity's rule shapes: ADD adds,
    SUB subtracts, MUL multiplies the reward by weight * stat, DIV divides by it).

    `stat` is the experience's metric `stats_key`, else its reward info value of that name when
    that reads as a number. A rule whose stat the experience lacks, or a DIV by zero, leaves the
    reward as it is and is counted (`missing_stats`, `zero_divisors`). Metrics: the reward change's
    mean, min and max over the batch."""
    rules = list(reward_shaping_configs)
    for problem in reward_shaping_issues(
        {"reward_shaping_configs": rules}, "reward_shaping_mapper"
    ):
        raise ConfigError(f"{problem.path}: {problem.message}")
    out = []
    diffs = []
    missing = zero = 0
    for exp in experiences:
        reward = exp.reward
        for rule in rules:
            stat = experience_stat(exp, rule["stats_key"])
            if stat is None:
                missing += 1
                continue
            term = float(rule.get("weight", 1.0)) * stat
            op = rule.get("op_type", "ADD")
            if op == "DIV" and term == 0.0:
                zero += 1
                continue
            reward = _apply(op, reward, term)
        diffs.append(reward - exp.reward)
        out.append(exp if reward == exp.reward else dataclasses.replace(exp, reward=reward))
    metrics = {"missing_stats": float(missing), "zero_divisors": float(zero)}
    if diffs:
        metrics |= {
            "reward_diff_mean": float(np.mean(diffs)),
            "reward_diff_min": float(np.min(diffs)),
            "reward_diff_max": float(np.max(diffs)),
        }
    return out, metrics


def _apply(op: str, reward: float, term: float) -> float:
    if op == "ADD":
        return reward + term
    if op == "SUB":
        return reward - term
    if op == "MUL":
        return reward * term
    return reward / term


def reward_shaping_issues(args: Mapping[str, Any], path: str) -> list[Issue]:
    """Load-time checks of reward_shaping_mapper's rules: a list of mappings, each with a
    `stats_key`, an `op_type` of ADD/SUB/MUL/DIV (default ADD) and a numeric `weight` (default 1)."""
    rules = args.get("reward_shaping_configs", ())
    key = f"{path}.reward_shaping_configs"
    if not isinstance(rules, Sequence) or isinstance(rules, str):
        return [Issue(key, f"must be a list of rules, got {type(rules).__name__}")]
    issues = []
    for i, rule in enumerate(rules):
        at = f"{key}[{i}]"
        if not isinstance(rule, Mapping):
            issues.append(Issue(at, f"must be a mapping, got {type(rule).__name__}"))
            continue
        issues += [
            Issue(f"{at}.{name}", f"is not a rule key (keys: {', '.join(_SHAPING_KEYS)})")
            for name in rule
            if name not in _SHAPING_KEYS
        ]
        if not isinstance(rule.get("stats_key"), str) or not rule.get("stats_key"):
            issues.append(Issue(f"{at}.stats_key", "is required: the statistic's name"))
        if rule.get("op_type", "ADD") not in SHAPING_OPS:
            issues.append(
                Issue(
                    f"{at}.op_type",
                    f"must be one of {', '.join(SHAPING_OPS)}, got {rule.get('op_type')!r}",
                )
            )
        weight = rule.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            issues.append(Issue(f"{at}.weight", f"must be a number, got {weight!r}"))
    return issues


def pass_rate_calculator(experiences: ExperienceBatch) -> OperatorResult:
    """Each task's pass rate in the batch (the mean reward of its experiences), summarised as
    metrics: pass_rate_mean / _min / _max over the tasks, and tasks. The experiences pass
    unchanged. (Trinity feeds the per-task rates to its task scheduler; rft's `difficulty_based`
    selector reads rewards from the experience topic itself, through `rft feed`.)"""
    rewards: dict[str, list[float]] = defaultdict(list)
    for exp in experiences:
        rewards[exp.task_id].append(exp.reward)
    rates = np.array([np.mean(r) for r in rewards.values()], dtype=np.float64)
    metrics = {"tasks": float(len(rates))}
    if len(rates):
        metrics |= {
            "pass_rate_mean": float(rates.mean()),
            "pass_rate_min": float(rates.min()),
            "pass_rate_max": float(rates.max()),
        }
    return list(experiences), metrics
