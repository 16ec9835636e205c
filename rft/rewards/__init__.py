"""Reward functions: the `REWARD_FUNCTIONS` registry and the built-in verifiable rewards.

The built-in `math_reward`, `accuracy_reward`, `countdown_reward`, `format_reward` and `llm_judge`
(a score from an auxiliary judge model, `rft.rewards.llm_judge`) are declared
in the registry by dotted path and imported when first looked up. Add one with `@REWARD_FUNCTIONS.register("name")` on a function of the shared
signature `fn(response_text, task_payload, **args) -> (reward, info)`.
"""

from __future__ import annotations

from rft.rewards.registry import (
    AUXILIARY_MODEL_ARG,
    REWARD_FUNCTIONS,
    RewardFn,
    RewardInfo,
    RewardInputError,
    asked_model,
)

__all__ = [
    "AUXILIARY_MODEL_ARG",
    "REWARD_FUNCTIONS",
    "RewardFn",
    "RewardInfo",
    "RewardInputError",
    "asked_model",
]
