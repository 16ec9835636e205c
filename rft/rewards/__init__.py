"""Reward functions: the `REWARD_FUNCTIONS` registry and the built-in verifiable rewards.

Importing this package registers `math_reward`, `accuracy_reward`, `countdown_reward` and
`format_reward`. Add one with `@REWARD_FUNCTIONS.register("name")` on a function of the shared
signature `fn(response_text, task_payload, **args) -> (reward, info)`.
"""

from __future__ import annotations

from rft.rewards import countdown_reward, format_reward, math_reward  # noqa: F401  (registers)
from rft.rewards.registry import REWARD_FUNCTIONS, RewardFn, RewardInfo, RewardInputError

__all__ = ["REWARD_FUNCTIONS", "RewardFn", "RewardInfo", "RewardInputError"]
