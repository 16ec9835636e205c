"""Sequence-level advantage functions (the `algorithm.advantage_fn` registry).

Signature of every entry: `fn(rewards[N], group_index[N] (long), **advantage_fn_args)
-> (advantages[N], metrics)`; entries with the trait `steps=True` also take the trajectory and
turn of each row (step-wise experiences, `rft.algorithms.step_advantages`); entries with the
trait `teacher=True` take a teacher's token logprobs instead and return token advantages
(`rft.algorithms.distill_advantages`). Rows that share a `group_index` value are rollouts of the same task
(`repeat_times` of them); group ids are arbitrary integers, not necessarily contiguous.
Statistics are computed in float64; the result has the rewards' float dtype (float32 for ints).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from rft.algorithms.tensor_checks import (
    AlgorithmInputError,
    ndim_error,
    non_finite_error,
    shape_error,
)
from rft.registry import PartSpec, Registry

AdvantageFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class AdvantageFnSpec(PartSpec):
    """What an advantage function's entry declares.

    - `critic`: it takes token rewards, a critic's values and the action mask (GAE), and returns
      the critic's targets too; its algorithm trains a critic;
    - `steps`: it computes advantages over the step-wise experiences of multi-turn episodes;
    - `teacher`: it takes old_logprob, teacher_logprob and action_mask instead of rewards (the
      trainer scores a distillation teacher).
    """

    critic: bool = False
    steps: bool = False
    teacher: bool = False


ADVANTAGE_FN: Registry[AdvantageFn, AdvantageFnSpec] = Registry(
    "algorithm.advantage_fn", AdvantageFnSpec
)


class GroupStats(NamedTuple):
    """Per-group statistics of a reward vector; `inverse[i]` is row i's group slot."""

    inverse: torch.Tensor
    counts: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor


def group_stats(values: torch.Tensor, group_index: torch.Tensor) -> GroupStats:
    """Count, mean and population std (divisor n, not n - 1) of `values` per group.

    std_g = sqrt((1/n_g) sum_{i in g} (v_i - mean_g)^2). The population form is used so that a
    group of one has std 0 (not NaN) and a group of two has the spread a user expects.
    """
    groups, inverse = torch.unique(group_index, return_inverse=True)
    n_groups = groups.numel()
    counts = torch.zeros(n_groups, dtype=values.dtype, device=values.device)
    counts.index_add_(0, inverse, torch.ones_like(values))
    sums = torch.zeros_like(counts).index_add_(0, inverse, values)
    mean = sums / counts
    sq = torch.zeros_like(counts).index_add_(0, inverse, (values - mean[inverse]) ** 2)
    std = torch.sqrt(sq / counts)
    return GroupStats(inverse, counts, mean, std)


def broadcast_advantages(advantages: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """Spread sequence advantages [N] over response tokens: A[b, t] = a[b] * mask[b, t]."""
    if action_mask.dim() != 2:
        raise ndim_error("action_mask", action_mask, 2)
    if advantages.shape != action_mask.shape[:1]:
        raise shape_error("advantages", action_mask.shape[:1], advantages.shape)
    return advantages[:, None] * action_mask.to(advantages.dtype)


def checked_rewards(rewards: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """The rewards [N] in float64, checked: finite, with one integer group index each."""
    if rewards.dim() != 1:
        raise ndim_error("rewards", rewards, 1)
    if group_index.shape != rewards.shape:
        raise shape_error("group_index", rewards.shape, group_index.shape)
    if group_index.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise AlgorithmInputError(
            f"group_index: expected an integer tensor, got dtype {group_index.dtype}"
        )
    r = rewards.to(torch.float64)
    if not bool(torch.isfinite(r).all()):
        raise non_finite_error("rewards", r)
    return r


def out_dtype(rewards: torch.Tensor) -> torch.dtype:
    return rewards.dtype if rewards.dtype.is_floating_point else torch.float32


def summary(r: torch.Tensor, adv: torch.Tensor, n_groups: int) -> dict[str, float]:
    if r.numel() == 0:
        return {"reward_mean": 0.0, "advantage_mean": 0.0, "group_count": 0.0}
    return {
        "reward_mean": float(r.mean()),
        "reward_std": float(r.std(unbiased=False)),
        "reward_max": float(r.max()),
        "reward_min": float(r.min()),
        "advantage_mean": float(adv.mean()),
        "advantage_std": float(adv.std(unbiased=False)),
        "advantage_abs_max": float(adv.abs().max()),
        "group_count": float(n_groups),
    }


@ADVANTAGE_FN.register("grpo")
def grpo_advantage(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    epsilon: float = 1e-6,
    std_normalize: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Group-relative advantage (GRPO).

    A_i = (r_i - mean_g) / (std_g + epsilon) with std_g the population std of group g
    (see `group_stats`); with `std_normalize=False`, A_i = r_i - mean_g (Dr. GRPO).
    A group of one, or a group with all-equal rewards, gets A = 0 (r_i - mean_g is exactly 0).
    """
    r = checked_rewards(rewards, group_index)
    stats = group_stats(r, group_index)
    adv = r - stats.mean[stats.inverse]
    if std_normalize:
        adv = adv / (stats.std[stats.inverse] + epsilon)
    metrics = summary(r, adv, stats.counts.numel())
    if stats.counts.numel():
        metrics["zero_std_group_frac"] = float((stats.std == 0).to(torch.float64).mean())
    return adv.to(out_dtype(rewards)), metrics


@ADVANTAGE_FN.register("rloo")
def rloo_advantage(
    rewards: torch.Tensor, group_index: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """REINFORCE leave-one-out: the baseline of a rollout is the mean of the others in its group.

    A_i = r_i - (1/(n_g - 1)) sum_{j in g, j != i} r_j = n_g/(n_g - 1) (r_i - mean_g);
    A_i = 0 for a group of one (there is no other rollout to compare with).
    """
    r = checked_rewards(rewards, group_index)
    stats = group_stats(r, group_index)
    n = stats.counts[stats.inverse]
    group_sum = (stats.mean * stats.counts)[stats.inverse]
    others_mean = (group_sum - r) / (n - 1).clamp(min=1.0)
    adv = torch.where(n > 1, r - others_mean, torch.zeros_like(r))
    return adv.to(out_dtype(rewards)), summary(r, adv, stats.counts.numel())


@ADVANTAGE_FN.register("reinforce_plus_plus")
def reinforce_plus_plus_advantage(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    epsilon: float = 1e-6,
    group_baseline: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """REINFORCE++: returns whitened over the whole batch (no critic, no per-group std).

    x_i = r_i (or r_i - mean_g with `group_baseline=True`, the "REINFORCE++-baseline" variant);
    A_i = (x_i - mean(x)) / (std(x) + epsilon), mean and population std over all N rows.
    Rewards here are per sequence; a token-level KL penalty, if wanted, is folded into r first
    (see `rft.algorithms.kl.apply_kl_penalty`).
    """
    r = checked_rewards(rewards, group_index)
    stats = group_stats(r, group_index)
    x = r - stats.mean[stats.inverse] if group_baseline else r
    adv = x if x.numel() == 0 else (x - x.mean()) / (x.std(unbiased=False) + epsilon)
    return adv.to(out_dtype(rewards)), summary(r, adv, stats.counts.numel())


# Trinity-RFT's spelling; rft's first name stays an alias
ADVANTAGE_FN.add("reinforceplusplus", reinforce_plus_plus_advantage)


@ADVANTAGE_FN.register("reinforce")
def reinforce_advantage(
    rewards: torch.Tensor, group_index: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """Plain REINFORCE: the reward itself is the advantage, A_i = r_i (no baseline).

    TOPR's paper trains on it; its tapering of negative examples is in the loss (`topr`).
    """
    r = checked_rewards(rewards, group_index)
    stats = group_stats(r, group_index)
    return r.to(out_dtype(rewards)), summary(r, r, stats.counts.numel())


@ADVANTAGE_FN.register("asymre")
def asymre_advantage(
    rewards: torch.Tensor, group_index: torch.Tensor, baseline_shift: float = -0.1
) -> tuple[torch.Tensor, dict[str, float]]:
    """AsymRE: REINFORCE with a group-mean baseline shifted by `baseline_shift`.

    A_i = r_i - (mean_g + baseline_shift) for a group of two or more; a group of one has no
    baseline (A_i = r_i). A negative shift (the default -0.1) lowers the baseline, so every
    rollout is pushed up a little more than it is pushed down: the asymmetry that keeps
    off-policy REINFORCE from collapsing.
    """
    r = checked_rewards(rewards, group_index)
    stats = group_stats(r, group_index)
    baseline = torch.where(
        stats.counts > 1, stats.mean + baseline_shift, torch.zeros_like(stats.mean)
    )
    adv = r - baseline[stats.inverse]
    return adv.to(out_dtype(rewards)), summary(r, adv, stats.counts.numel())


OpmdBaseline = Callable[[torch.Tensor, GroupStats, torch.Tensor, float], torch.Tensor]

OPMD_BASELINES: Registry[OpmdBaseline] = Registry("algorithm.advantage_fn_args.opmd_baseline")


@OPMD_BASELINES.register("mean")
def _opmd_mean_baseline(
    r: torch.Tensor, stats: GroupStats, group_index: torch.Tensor, tau: float
) -> torch.Tensor:
    return stats.mean[stats.inverse]


@OPMD_BASELINES.register("logavgexp")
def _opmd_logavgexp_baseline(
    r: torch.Tensor, stats: GroupStats, group_index: torch.Tensor, tau: float
) -> torch.Tensor:
    # Subtract the group max before exp so large rewards / small tau do not overflow.
    scaled = r / tau
    gmax = torch.full_like(stats.counts, -math.inf).scatter_reduce(
        0, stats.inverse, scaled, reduce="amax"
    )
    sums = torch.zeros_like(stats.counts).index_add_(
        0, stats.inverse, torch.exp(scaled - gmax[stats.inverse])
    )
    logavgexp = gmax + torch.log(sums / stats.counts)
    return tau * logavgexp[stats.inverse]


@ADVANTAGE_FN.register("opmd")
def opmd_advantage(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    tau: float = 1.0,
    opmd_baseline: str = "mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Online policy mirror descent (OPMD) advantage: reward minus a group baseline.

    opmd_baseline="mean":      b_g = mean_g(r)
    opmd_baseline="logavgexp": b_g = tau * log((1/n_g) sum_{j in g} exp(r_j / tau))
    A_i = r_i - b_g. The OPMD policy loss divides by (1 + tau); `tau` > 0 is the strength of the
    regularisation towards the rollout policy.
    """
    if not tau > 0:
        raise AlgorithmInputError(f"advantage_fn_args.tau: must be > 0, got {tau!r}")
    baseline_fn = OPMD_BASELINES.get(opmd_baseline)
    r = checked_rewards(rewards, group_index)
    stats = group_stats(r, group_index)
    adv = r - baseline_fn(r, stats, group_index, tau)
    return adv.to(out_dtype(rewards)), summary(r, adv, stats.counts.numel())


# Step-wise experiences (one per turn): declared here so every user of the registry sees them
ADVANTAGE_FN.lazy("preference", "rft.algorithms.preference_losses:preference_advantage")
ADVANTAGE_FN.lazy(
    "step_wise_grpo", "rft.algorithms.step_advantages:step_wise_grpo_advantage", steps=True
)
# GAE from a critic's values (algorithm_type ppo): the trait `critic` says the entry takes token
# rewards, the critic's values and the action mask, and returns the critic's targets too
ADVANTAGE_FN.lazy("ppo", "rft.algorithms.gae:gae_advantage", critic=True)
ADVANTAGE_FN.lazy("gae", "rft.algorithms.gae:gae_advantage", critic=True)
# Token advantages from a teacher's logprobs of the student's samples (trait `teacher`: they take
# old_logprob, teacher_logprob and action_mask instead of rewards; the trainer scores the teacher)
ADVANTAGE_FN.lazy(
    "on_policy_distill",
    "rft.algorithms.distill_advantages:on_policy_distill_advantage",
    teacher=True,
)
ADVANTAGE_FN.lazy("jsd", "rft.algorithms.distill_advantages:jsd_advantage", teacher=True)
