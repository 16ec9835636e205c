"""Per-algorithm defaults for the `algorithm` section, as Trinity-RFT fills them.

A key left out of `algorithm` (advantage_fn, policy_loss_fn, ...) takes the value listed here for
its `algorithm_type`. An algorithm type not listed here gets no defaults: its keys stay as given.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AlgorithmDefaults:
    """The loss/advantage parts an algorithm type uses unless the config names others."""

    advantage_fn: str | None
    policy_loss_fn: str
    kl_penalty_fn: str = "none"
    kl_loss_fn: str = "k2"
    entropy_loss_fn: str = "default"
    sample_strategy: str = "default"
    min_repeat_times: int = 1  # group-relative advantages need at least two rollouts per task
    fixed_repeat_times: int | None = None  # pairwise algorithms need exactly this many


ALGORITHM_DEFAULTS: dict[str, AlgorithmDefaults] = {
    "ppo": AlgorithmDefaults(advantage_fn="ppo", policy_loss_fn="ppo"),
    "grpo": AlgorithmDefaults(advantage_fn="grpo", policy_loss_fn="ppo", min_repeat_times=2),
    "opmd": AlgorithmDefaults(advantage_fn="opmd", policy_loss_fn="opmd", min_repeat_times=2),
    "sft": AlgorithmDefaults(
        advantage_fn=None, policy_loss_fn="sft", kl_loss_fn="none", entropy_loss_fn="none"
    ),
    "dpo": AlgorithmDefaults(
        advantage_fn=None, policy_loss_fn="dpo", entropy_loss_fn="none", fixed_repeat_times=2
    ),
}
