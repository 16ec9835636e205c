"""The experience operators (`data_processor.experience_pipeline.operators`, the
EXPERIENCE_OPERATORS registry, Trinity-RFT's names), and the one signature they share.

An operator takes the learner experiences of one sampled batch, decoded, and returns the ones to
train (a subsequence, in order: it may drop experiences and may return changed copies, never new
ones) and its metrics: `fn(experiences, **args) -> (experiences, metrics)`. Its args are the
config entry's `args`, checked at load against its keywords (and by the entry's own `check`).
The trainer applies the operators in order to each batch before the step
(`rft.buffer.experience_pipeline`). Users add one with `@EXPERIENCE_OPERATORS.register("name")`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from rft.events.models import Experience
from rft.registry import Registry

OperatorResult = tuple[list[Experience], dict[str, float]]
# fn(experiences, **args) -> (experiences kept, in order, maybe changed; metrics)
ExperienceOperator = Callable[..., OperatorResult]
ExperienceBatch = Sequence[Experience]

EXPERIENCE_OPERATORS: Registry[ExperienceOperator] = Registry("experience operator")
EXPERIENCE_OPERATORS.lazy("reward_filter", "rft.buffer.reward_filters:reward_filter")
EXPERIENCE_OPERATORS.lazy(
    "dapo_dynamic_sampling", "rft.buffer.reward_filters:dapo_dynamic_sampling"
)
EXPERIENCE_OPERATORS.lazy("reward_std_filter", "rft.buffer.reward_filters:reward_std_filter")
EXPERIENCE_OPERATORS.lazy(
    "invalid_reward_filter", "rft.buffer.reward_filters:invalid_reward_filter"
)
EXPERIENCE_OPERATORS.lazy(
    "mask_response_truncated", "rft.buffer.experience_mappers:mask_response_truncated"
)
EXPERIENCE_OPERATORS.lazy(
    "reward_shaping_mapper",
    "rft.buffer.experience_mappers:reward_shaping_mapper",
    check="rft.buffer.experience_mappers:reward_shaping_issues",
)
EXPERIENCE_OPERATORS.lazy(
    "pass_rate_calculator", "rft.buffer.experience_mappers:pass_rate_calculator"
)


def experience_stat(exp: Experience, key: str) -> float | None:
    """A statistic of one experience by name: its metric `key`, else its reward info `key` when
    that reads as a finite number (reward functions' info is stored as text); None otherwise."""
    if key in exp.metrics:
        return float(exp.metrics[key])
    text = exp.info.get(key)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
