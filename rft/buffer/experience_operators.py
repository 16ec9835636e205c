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

from collections.abc import Callable, Sequence

from rft.events.models import Experience
from rft.registry import Registry

OperatorResult = tuple[list[Experience], dict[str, float]]
# fn(experiences, **args) -> (experiences kept, in order, maybe changed; metrics)
ExperienceOperator = Callable[..., OperatorResult]
ExperienceBatch = Sequence[Experience]

EXPERIENCE_OPERATORS: Registry[ExperienceOperator] = Registry("experience operator")
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
