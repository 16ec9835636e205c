"""The surrogate objectives of named algorithms: GSPO, CISPO, TOPR and SAPO (POLICY_LOSS_FN).

Each keeps POLICY_LOSS_FN's signature and Trinity-RFT's registry name and argument names; the
formulas follow the papers (GSPO arXiv:2507.18071, CISPO arXiv:2506.13585, TOPR arXiv:2503.14286,
SAPO arXiv:2511.20347). `old_logprob` is the behaviour policy's, as for `ppo`.
sg(x) below means x with no gradient (detached).
"""

from __future__ import annotations

import torch

from rft.algorithms.aggregation import aggregate_loss, masked_mean
from rft.algorithms.policy_losses import (
    LOG_RATIO_BOUND,
    checked_inputs,
    clip_bounds,
    clipped_surrogate,
    ratio_summary,
)
from rft.algorithms.tensor_checks import AlgorithmInputError

# GSPO's published ranges for the sequence ratio (tiny: it is a geometric mean over tokens)
GSPO_CLIP_LOW = 3e-4
GSPO_CLIP_HIGH = 4e-4


def gspo_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    clip_range: float | None = None,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO (token form): one importance ratio per sequence, the geometric mean of its tokens'.

    l_b = (1/|y_b|) sum_t (logprob_bt - old_bt)     (masked mean over the response tokens)
    s_bt = exp(logprob_bt - sg(logprob_bt) + sg(l_b))   value exp(l_b); gradient s * grad logprob
    L_bt = max(-A_bt s_bt, -A_bt clip(s_bt, 1 - eps_low, 1 + eps_high))
    loss = aggregate_loss(L, action_mask, loss_agg_mode) (the paper: seq-mean-token-mean).
    The ranges are tiny because a sequence ratio moves far less than a token's: each bound is
    its own arg, else clip_range, else the GSPO default (eps_low 3e-4, eps_high 4e-4). Metrics: pg_loss, pg_clipfrac, ppo_kl (token mean of old - logprob),
    ppo_kl_seq (mean over sequences of -l_b), seq_ratio_mean/min/max.
    """
    old, adv, m = checked_inputs(logprob, old_logprob, advantages, action_mask, "gspo")
    low, high = clip_bounds(
        0.0,
        next(v for v in (clip_range_low, clip_range, GSPO_CLIP_LOW) if v is not None),
        next(v for v in (clip_range_high, clip_range, GSPO_CLIP_HIGH) if v is not None),
    )
    token_log_ratio = logprob - old
    counts = m.sum(dim=-1)
    seq_log_ratio = (
        torch.where(m > 0, token_log_ratio * m, torch.zeros_like(token_log_ratio)).sum(dim=-1)
        / counts.clamp(min=1.0)
    ).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    seq_ratio_tokens = torch.exp(logprob - logprob.detach() + seq_log_ratio.detach()[:, None])
    surrogate = clipped_surrogate(seq_ratio_tokens, adv, low, high)
    loss = aggregate_loss(surrogate.loss, m, loss_agg_mode)
    metrics = surrogate.metrics(m)
    with torch.no_grad():
        rows = counts > 0
        seq_ratio = torch.exp(seq_log_ratio[rows])
        metrics.update(
            {
                "pg_loss": float(loss.detach()),
                "ppo_kl": float(masked_mean(-token_log_ratio, m)),
                "ppo_kl_seq": float(-seq_log_ratio[rows].mean()) if rows.any() else 0.0,
                **ratio_summary(seq_ratio, torch.ones_like(seq_ratio), "seq_ratio"),
            }
        )
    return loss, metrics


def cispo_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    clip_range_low: float = 1.0,
    clip_range_high: float = 0.28,
    enable_mask_clip: bool = False,
    mask_clip_range_low: float = 1.0,
    mask_clip_range_high: float = 0.28,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO: clip the importance-sampling WEIGHT, never the token's gradient.

    r_t = exp(logprob_t - old_t)
    M_t = 0 if (enable_mask_clip and ((A_t > 0 and r_t > 1 + mask_high) or
                                       (A_t < 0 and r_t < 1 - mask_low))) else 1
    L_t = -sg(clip(r_t, 1 - eps_low, 1 + eps_high) * M_t) * A_t * logprob_t
    loss = aggregate_loss(L, action_mask, loss_agg_mode).
    Unlike PPO, a token beyond the range keeps its gradient (weighted by the clipped ratio); the
    paper sets no lower bound (clip_range_low 1.0: 1 - 1 = 0). Metrics: pg_loss, ppo_kl,
    pg_clipfrac (tokens whose weight was clipped), masked_frac.
    """
    old, adv, m = checked_inputs(logprob, old_logprob, advantages, action_mask, "cispo")
    if not (0 <= clip_range_low <= 1 and clip_range_high >= 0):
        raise AlgorithmInputError(
            "policy_loss_fn_args: cispo needs 0 <= clip_range_low <= 1 and clip_range_high >= 0, "
            f"got low={clip_range_low!r} high={clip_range_high!r}"
        )
    log_ratio = (logprob.detach() - old).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    weight = ratio.clamp(1.0 - clip_range_low, 1.0 + clip_range_high)
    keep = torch.ones_like(ratio)
    if enable_mask_clip:
        too_high = (ratio > 1.0 + mask_clip_range_high) & (adv > 0)
        too_low = (ratio < 1.0 - mask_clip_range_low) & (adv < 0)
        keep = (~(too_high | too_low)).to(ratio.dtype)
    loss = aggregate_loss(-(weight * keep) * adv * logprob, m, loss_agg_mode)
    with torch.no_grad():
        metrics = {
            "pg_loss": float(loss.detach()),
            "ppo_kl": float(masked_mean(-log_ratio, m)),
            "pg_clipfrac": float(masked_mean((weight != ratio).to(m.dtype), m)),
            "masked_frac": float(masked_mean(1.0 - keep, m)),
        }
    return loss, metrics


def topr_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    advantage_threshold: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """TOPR (tapered off-policy REINFORCE): full REINFORCE on positive examples, importance
    weights truncated to [0, 1] on negative ones.

    r_t = exp(logprob_t - old_t)
    alpha_t = clip(r_t, 0, 1) if A_t <= advantage_threshold else 1
    L_t = -sg(alpha_t) * A_t * logprob_t
    loss = aggregate_loss(L, action_mask, loss_agg_mode).
    The paper uses the reward as A (advantage_fn `reinforce`); a baseline (grpo) works too.
    Metrics: pg_loss, ppo_kl, alpha_mean (over tokens), ratio_mean/min/max.
    """
    old, adv, m = checked_inputs(logprob, old_logprob, advantages, action_mask, "topr")
    log_ratio = (logprob.detach() - old).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    alpha = torch.where(adv <= advantage_threshold, ratio.clamp(0.0, 1.0), torch.ones_like(ratio))
    loss = aggregate_loss(-alpha * adv * logprob, m, loss_agg_mode)
    with torch.no_grad():
        metrics = {
            "pg_loss": float(loss.detach()),
            "ppo_kl": float(masked_mean(-log_ratio, m)),
            "alpha_mean": float(masked_mean(alpha, m)),
            **ratio_summary(ratio, m),
        }
    return loss, metrics


def sapo_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> tuple[torch.Tensor, dict[str, float]]:
    """SAPO: a smooth, temperature-controlled gate on the ratio instead of a hard clip.

    r_t = exp(logprob_t - old_t)
    tau_t = tau_pos if A_t > 0 else tau_neg
    g_t = sigmoid(tau_t (r_t - 1)) * 4 / tau_t
    L_t = -g_t * A_t
    loss = aggregate_loss(L, action_mask, loss_agg_mode).
    dg/dr = 4 sigmoid(x)(1 - sigmoid(x)) with x = tau (r - 1): 1 at r = 1 (the policy gradient
    on policy), decaying smoothly as r leaves 1, faster for larger tau (the paper sets
    tau_neg > tau_pos: negative advantages spread to many unsampled tokens and destabilise more).
    Metrics: pg_loss, ppo_kl, gate_grad_mean (mean of dg/dr over tokens), ratio_mean/min/max.
    """
    old, adv, m = checked_inputs(logprob, old_logprob, advantages, action_mask, "sapo")
    if not (tau_pos > 0 and tau_neg > 0):
        raise AlgorithmInputError(
            f"policy_loss_fn_args: sapo needs tau_pos > 0 and tau_neg > 0, got {tau_pos!r}, "
            f"{tau_neg!r}"
        )
    log_ratio = (logprob - old).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    tau = torch.where(adv > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau
    loss = aggregate_loss(-gate * adv, m, loss_agg_mode)
    with torch.no_grad():
        s = torch.sigmoid(tau * (ratio - 1.0))
        metrics = {
            "pg_loss": float(loss.detach()),
            "ppo_kl": float(masked_mean(-log_ratio, m)),
            "gate_grad_mean": float(masked_mean(4.0 * s * (1.0 - s), m)),
            **ratio_summary(ratio, m),
        }
    return loss, metrics
