"""Advantages of step-wise experiences: one experience per turn of a multi-turn trajectory.

Signature of an entry registered with the trait `steps=True`: `fn(rewards[N], group_index[N],
trajectory_index[N], turn[N], **advantage_fn_args) -> (advantages[N], metrics)`. Rows sharing a
`trajectory_index` are the steps of one trajectory (all in one group), `turn` their order in it.
The advantage is computed per trajectory, so a long trajectory weighs as much as a short one in
its group's statistics, and is then given to every step of it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rft.algorithms.advantages import ADVANTAGE_FN, checked_rewards, out_dtype, summary
from rft.algorithms.tensor_checks import AlgorithmInputError, require_shape
from rft.registry import Registry

# How the spread of trajectory rewards is measured: per task group, or over the whole batch
StdScope = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
STEP_STD_SCOPES: Registry[StdScope] = Registry("algorithm.advantage_fn_args.std_cal_level")


def _sample_std(values: torch.Tensor) -> torch.Tensor:
    """Sample std (divisor n - 1) of a vector; 1 when it has fewer than two values."""
    if values.numel() < 2:
        return torch.ones((), dtype=values.dtype)
    return values.std(unbiased=True)


@STEP_STD_SCOPES.register("group")
def _group_std(returns: torch.Tensor, inverse: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    n_groups = counts.numel()
    sums = torch.zeros(n_groups, dtype=returns.dtype).index_add_(0, inverse, returns)
    mean = sums / counts
    sq = torch.zeros(n_groups, dtype=returns.dtype).index_add_(
        0, inverse, (returns - mean[inverse]) ** 2
    )
    std = torch.sqrt(sq / (counts - 1).clamp(min=1.0))
    return torch.where(counts > 1, std, torch.ones_like(std))


@STEP_STD_SCOPES.register("batch")
def _batch_std(returns: torch.Tensor, inverse: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    return _sample_std(returns).expand(counts.numel())


def trajectory_returns(
    r: torch.Tensor, trajectory_index: torch.Tensor, turn: torch.Tensor, group_index: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(R [J], inverse [N] row -> trajectory, steps [J], group [J]) of the J trajectories.

    R_j is the reward of trajectory j's last step (its highest turn): the outcome of the whole
    trajectory (each step carries it; with per-step rewards, the last one is the outcome).
    """
    trajectories, inverse = torch.unique(trajectory_index, return_inverse=True)
    n = trajectories.numel()
    turn = turn.to(torch.long)
    last_turn = torch.full((n,), -1, dtype=torch.long).scatter_reduce(
        0, inverse, turn, reduce="amax"
    )
    is_last = turn == last_turn[inverse]
    lasts = torch.zeros(n, dtype=torch.long).index_add_(0, inverse, is_last.to(torch.long))
    if bool((lasts != 1).any()):
        j = int((lasts != 1).nonzero()[0])
        raise AlgorithmInputError(
            f"trajectory_index: trajectory {int(trajectories[j])} has {int(lasts[j])} steps at "
            f"its last turn {int(last_turn[j])} (each turn must come once)"
        )
    returns = torch.zeros(n, dtype=r.dtype).index_put_((inverse[is_last],), r[is_last])
    steps = torch.zeros(n, dtype=r.dtype).index_add_(0, inverse, torch.ones_like(r))
    group = torch.full((n,), -1, dtype=torch.long).index_put_(
        (inverse,), group_index.to(torch.long)
    )
    if bool((group[inverse] != group_index.to(torch.long)).any()):
        raise AlgorithmInputError("trajectory_index: a trajectory's steps are in several groups")
    return returns, inverse, steps, group


@ADVANTAGE_FN.register("step_wise_grpo", steps=True)
def step_wise_grpo_advantage(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    trajectory_index: torch.Tensor,
    turn: torch.Tensor,
    epsilon: float = 1e-6,
    enable_step_norm: bool = False,
    std_cal_level: str = "group",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Multi-step GRPO (Trinity-RFT's `step_wise_grpo`, the advantage of `multi_step_grpo`).

    For the trajectories j of group g (n_g of them), R_j the reward of j's last step:
      a_j = (R_j - mean_g(R)) / (s + epsilon)
    mean_g and s (the sample std, divisor n_g - 1) over the trajectories of g, not over their
    steps; a group of one trajectory has mean 0 and s 1 (a_j = R_j / (1 + epsilon)).
    std_cal_level "batch": s is the sample std of every trajectory's R_j in the batch (1 when
    there is one), the mean still the group's. enable_step_norm: a_j / L_j, L_j the number of
    steps of trajectory j. Every step i of trajectory j gets A_i = a_j.
    """
    r = checked_rewards(rewards, group_index)
    require_shape("trajectory_index", trajectory_index, rewards.shape)
    require_shape("turn", turn, rewards.shape)
    if not epsilon >= 0:
        raise AlgorithmInputError(f"advantage_fn_args.epsilon: must be >= 0, got {epsilon!r}")
    std_fn = STEP_STD_SCOPES.get(std_cal_level)
    returns, inverse, steps, group = trajectory_returns(r, trajectory_index, turn, group_index)
    groups, g_inv = torch.unique(group, return_inverse=True)
    counts = torch.zeros(groups.numel(), dtype=r.dtype).index_add_(
        0, g_inv, torch.ones_like(returns)
    )
    means = torch.zeros_like(counts).index_add_(0, g_inv, returns) / counts.clamp(min=1.0)
    means = torch.where(counts > 1, means, torch.zeros_like(means))
    std = std_fn(returns, g_inv, counts)
    per_trajectory = (returns - means[g_inv]) / (std[g_inv] + epsilon)
    if enable_step_norm:
        per_trajectory = per_trajectory / steps
    adv = per_trajectory[inverse]
    metrics = summary(returns, per_trajectory, groups.numel())
    if returns.numel():
        metrics["trajectory_count"] = float(returns.numel())
        metrics["steps_per_trajectory"] = float(steps.mean())
    return adv.to(out_dtype(rewards)), metrics
