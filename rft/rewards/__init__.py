"""Reward functions: the `REWARD_FUNCTIONS` registry and the built-in verifiable rewards.

The built-in `math_reward`, `accuracy_reward`, `countdown_reward` and `format_reward` are declared
in the registry by dotted path and imported when first looked up. Add one with `@REWARD_FUNCTIONS.register("name")` on a function of the shared
signature `fn(response_text, task_payload, **args) -> (reward, info)`.
"""

from __future__ import annotations

from rft.rewards.registry import REWARD_FUNCTIONS, RewardFn, RewardInfo, RewardInputError

__all__ = ["REWARD_FUNCTIONS", "RewardFn", "RewardInfo", "RewardInputError"]
