"""Policy-gradient losses (the `algorithm.policy_loss_fn` registry, POLICY_LOSS_FN).

Signature of every entry: `fn(logprob[B, T], old_logprob[B, T], advantages[B, T],
action_mask[B, T], loss_agg_mode, **policy_loss_fn_args) -> (loss scalar, metrics)`.
`logprob` carries the gradient; `old_logprob` is what the rollout policy gave the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rft.algorithms.aggregation import aggregate_loss, masked_mean
from rft.algorithms.tensor_checks import (
    AlgorithmInputError,
    as_float_mask,
    require_ndim,
    require_shape,
)
from rft.registry import Registry

PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]

POLICY_LOSS_FN: Registry[PolicyLossFn] = Registry("algorithm.policy_loss_fn")

# exp() of a log-ratio beyond this bound overflows float32 long before it means anything.
LOG_RATIO_BOUND = 20.0


def _checked(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor | None,
    advantages: torch.Tensor | None,
    action_mask: torch.Tensor,
    loss_name: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    require_ndim("logprob", logprob, 2)
    if old_logprob is None or advantages is None:
        raise AlgorithmInputError(
            f"policy_loss_fn {loss_name!r} needs old_logprob and advantages for every token"
        )
    require_shape("old_logprob", old_logprob, logprob.shape)
    require_shape("advantages", advantages, logprob.shape)
    m = as_float_mask("action_mask", action_mask, logprob.shape, logprob.dtype)
    return old_logprob.to(logprob.dtype), advantages.to(logprob.dtype), m


@POLICY_LOSS_FN.register("ppo")
def ppo_policy_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip surrogate, with optional asymmetric ranges and dual clip.

    rho = exp(clamp(logprob - old_logprob, -20, 20))
    L_t = max(-A_t rho_t, -A_t clip(rho_t, 1 - eps_low, 1 + eps_high))
    eps_low/eps_high default to clip_range. With clip_ratio_c = c > 1 (dual clip), tokens with
    A_t < 0 use min(L_t, -A_t c), bounding the loss when rho is very large.
    loss = aggregate_loss(L, action_mask, loss_agg_mode).
    Metrics: pg_loss; pg_clipfrac (share of tokens where the clipped branch is taken);
    ppo_kl = masked mean of (old_logprob - logprob); ratio_mean/min/max over unmasked tokens;
    pg_clipfrac_lower (share cut by the dual clip) when clip_ratio_c is set.
    """
    old, adv, m = _checked(logprob, old_logprob, advantages, action_mask, "ppo")
    low = clip_range if clip_range_low is None else clip_range_low
    high = clip_range if clip_range_high is None else clip_range_high
    if not (0 <= low < 1 and high >= 0):
        raise AlgorithmInputError(
            f"policy_loss_fn_args: need 0 <= clip_range_low < 1 and clip_range_high >= 0, "
            f"got low={low!r} high={high!r}"
        )
    log_ratio = (logprob - old).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - low, 1.0 + high)
    loss_mat = torch.maximum(unclipped, clipped)
    metrics: dict[str, float] = {}
    if clip_ratio_c is not None:
        if not clip_ratio_c > 1.0:
            raise AlgorithmInputError(
                f"policy_loss_fn_args.clip_ratio_c: must be > 1, got {clip_ratio_c!r}"
            )
        lower = -adv * clip_ratio_c
        dual = torch.where(adv < 0, torch.minimum(loss_mat, lower), loss_mat)
        metrics["pg_clipfrac_lower"] = float(
            masked_mean(((dual < loss_mat) & (adv < 0)).to(logprob.dtype), m)
        )
        loss_mat = dual
    loss = aggregate_loss(loss_mat, m, loss_agg_mode)
    with torch.no_grad():
        valid = m > 0
        ratios = ratio[valid]
        metrics.update(
            {
                "pg_loss": float(loss.detach()),
                "pg_clipfrac": float(masked_mean((clipped > unclipped).to(logprob.dtype), m)),
                "ppo_kl": float(masked_mean(-log_ratio, m)),
                "ratio_mean": float(ratios.mean()) if ratios.numel() else 1.0,
                "ratio_min": float(ratios.min()) if ratios.numel() else 1.0,
                "ratio_max": float(ratios.max()) if ratios.numel() else 1.0,
            }
        )
    return loss, metrics


@POLICY_LOSS_FN.register("sft")
def sft_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor | None,
    advantages: torch.Tensor | None,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Supervised fine-tuning: negative log-likelihood of the response tokens.

    loss = aggregate_loss(-logprob, action_mask, loss_agg_mode); old_logprob and advantages are
    ignored (they may be None).
    """
    require_ndim("logprob", logprob, 2)
    loss = aggregate_loss(-logprob, action_mask, loss_agg_mode)
    return loss, {"sft_loss": float(loss.detach())}


@POLICY_LOSS_FN.register("opmd")
def opmd_policy_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    tau: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Online policy mirror descent surrogate (pairs with the "opmd" advantage).

    loss = aggregate_loss(-A_t * logprob_t, mask, loss_agg_mode) / (1 + tau)
    The 1/(1 + tau) factor is the step size of the mirror-descent update regularised by tau.
    """
    old, adv, m = _checked(logprob, old_logprob, advantages, action_mask, "opmd")
    if not tau > 0:
        raise AlgorithmInputError(f"policy_loss_fn_args.tau: must be > 0, got {tau!r}")
    loss = aggregate_loss(-adv * logprob, m, loss_agg_mode) / (1.0 + tau)
    return loss, {
        "pg_loss": float(loss.detach()),
        "ppo_kl": float(masked_mean((old - logprob).detach(), m)),
    }
