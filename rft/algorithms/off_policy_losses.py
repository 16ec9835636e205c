"""Off-policy-corrected policy losses: decoupled PPO, truncated IS (TIS) and masked IS.

In an asynchronous run an experience was sampled by the behaviour policy pi_behav (the weight
version it carries; `old_logprob` = its logprobs) and is trained on by weights some versions newer.
Three policies meet in one step:

  pi_behav  the rollout policy, from the Experience event (`old_logprob`)
  pi_prox   the proximal policy: the trainer's weights before this optimizer step
  pi_theta  the weights being optimised (`logprob`, with gradient)

Where pi_prox comes from. rft's trainer recomputes every row's logprobs with its current weights
and takes ONE optimizer step per batch, so at the moment of the forward pi_theta's weights ARE the
proximal weights: pi_prox = logprob.detach() exactly. That is what these losses use when no
`prox_logprob` is passed (AlgorithmLoss passes LossBatch.prox_logprob when the trainer fills it).
A trainer that takes several optimizer steps per batch (PPO epochs or mini-batches) must instead
record the logprobs of the batch before its first step and pass them as `prox_logprob`; after the
first step logprob.detach() is no longer the proximal policy.

All three entries share POLICY_LOSS_FN's signature; `prox_logprob` is a keyword the trainer fills,
never a config arg.
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
from rft.algorithms.tensor_checks import AlgorithmInputError, require_shape


def proximal(logprob: torch.Tensor, prox_logprob: torch.Tensor | None) -> torch.Tensor:
    """The proximal policy's logprobs: the given ones, or the recomputed ones detached (exact for
    one optimizer step per batch, see the module docstring)."""
    if prox_logprob is None:
        return logprob.detach()
    require_shape("prox_logprob", prox_logprob, logprob.shape)
    return prox_logprob.detach().to(logprob.dtype)


def _positive(name: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise AlgorithmInputError(f"policy_loss_fn_args.{name}: must be > 0, got {value!r}")


def decoupled_ppo_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    prox_logprob: torch.Tensor | None = None,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float | None = None,
    behav_imp_weight_cap: float | None = 5.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Decoupled PPO (AReaL): clip against the proximal policy, reweight by pi_prox / pi_behav.

    w_t = min(exp(prox_t - behav_t), C)            (no gradient; C = behav_imp_weight_cap,
                                                     None: not truncated)
    r_t = exp(logprob_t - prox_t)
    L_t = w_t * max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high))
    with the dual clip of `ppo` (clip_ratio_c) applied inside the bracket.
    loss = aggregate_loss(L, action_mask, loss_agg_mode).

    The trust region is measured from pi_prox, however stale pi_behav is; the staleness is paid
    for by w alone. With prox = logprob.detach() (one step per batch) r_t = 1, the clip never
    binds, and the gradient is -w_t A_t grad log pi_theta: the truncated importance-weighted
    policy gradient. Log-ratios are clamped to +-20 before exp().
    Metrics: pg_loss, pg_clipfrac, ppo_kl = mean(prox - logprob), behav_kl = mean(behav - prox),
    ratio_mean/min/max (of r), behav_weight_mean/min/max, behav_truncated_frac (share of tokens whose w hit C).
    """
    behav, adv, m = checked_inputs(logprob, old_logprob, advantages, action_mask, "decoupled_ppo")
    _positive("behav_imp_weight_cap", behav_imp_weight_cap)
    low, high = clip_bounds(clip_range, clip_range_low, clip_range_high)
    prox = proximal(logprob, prox_logprob)
    behav_log_ratio = (prox - behav).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    raw_weight = torch.exp(behav_log_ratio)
    weight = (
        raw_weight if behav_imp_weight_cap is None else raw_weight.clamp(max=behav_imp_weight_cap)
    )
    log_ratio = (logprob - prox).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    surrogate = clipped_surrogate(ratio, adv, low, high, clip_ratio_c)
    loss = aggregate_loss(weight * surrogate.loss, m, loss_agg_mode)
    metrics = surrogate.metrics(m)
    with torch.no_grad():
        truncated = (raw_weight > weight).to(m.dtype)
        metrics.update(
            {
                "pg_loss": float(loss.detach()),
                "ppo_kl": float(masked_mean(-log_ratio, m)),
                "behav_kl": float(masked_mean(-behav_log_ratio, m)),
                "behav_truncated_frac": float(masked_mean(truncated, m)),
                **ratio_summary(ratio, m),
                **ratio_summary(weight, m, "behav_weight"),
            }
        )
    return loss, metrics


def truncated_is_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    tis_imp_ratio_cap: float = 2.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance sampling (TIS): the policy gradient reweighted by the behaviour ratio,
    the weight truncated at C = tis_imp_ratio_cap.

    rho_t = exp(logprob_t - behav_t)
    L_t = -sg(min(rho_t, C)) * A_t * logprob_t       (sg: no gradient through the weight)
    loss = aggregate_loss(L, action_mask, loss_agg_mode).
    The gradient is -min(rho_t, C) A_t grad log pi_theta: for rho_t < C exactly the gradient of
    the importance-sampled objective -rho_t A_t; above C the token still pushes, with weight C
    (truncation, unlike PPO's clip, never silences a token). No trust region: pair it with a
    small learning rate, or use decoupled_ppo.
    Metrics: pg_loss, ppo_kl = mean(behav - logprob), tis_weight_mean/min/max,
    tis_truncated_frac.
    """
    behav, adv, m = checked_inputs(logprob, old_logprob, advantages, action_mask, "tis")
    _positive("tis_imp_ratio_cap", tis_imp_ratio_cap)
    log_ratio = (logprob.detach() - behav).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    rho = torch.exp(log_ratio)
    weight = rho.clamp(max=tis_imp_ratio_cap)
    loss = aggregate_loss(-weight * adv * logprob, m, loss_agg_mode)
    with torch.no_grad():
        metrics = {
            "pg_loss": float(loss.detach()),
            "ppo_kl": float(masked_mean(-log_ratio, m)),
            "tis_truncated_frac": float(masked_mean((rho > weight).to(m.dtype), m)),
            **ratio_summary(weight, m, "tis_weight"),
        }
    return loss, metrics


def masked_is_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    mask_ratio_low: float = 0.5,
    mask_ratio_high: float = 2.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Importance-sampled policy gradient with token masking: a token whose behaviour ratio
    leaves [mask_ratio_low, mask_ratio_high] gets no gradient at all.

    rho_t = exp(logprob_t - behav_t)
    M_t = 1 if mask_ratio_low <= rho_t <= mask_ratio_high else 0     (no gradient)
    L_t = -M_t * sg(rho_t) * A_t * logprob_t
    loss = aggregate_loss(L, action_mask, loss_agg_mode): masked tokens still count in the
    denominator, so masking removes their push without inflating the others'.
    Where TIS keeps a token far off policy at weight C, masking drops it: its sample says little
    about pi_theta and its weight would be noise.
    Metrics: pg_loss, ppo_kl, masked_frac (share of tokens masked), is_weight_mean/min/max
    over the kept tokens.
    """
    behav, adv, m = checked_inputs(logprob, old_logprob, advantages, action_mask, "masked_is")
    if not 0 <= mask_ratio_low <= 1 <= mask_ratio_high:
        raise AlgorithmInputError(
            "policy_loss_fn_args: need 0 <= mask_ratio_low <= 1 <= mask_ratio_high, got "
            f"low={mask_ratio_low!r} high={mask_ratio_high!r}"
        )
    log_ratio = (logprob.detach() - behav).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    rho = torch.exp(log_ratio)
    keep = ((rho >= mask_ratio_low) & (rho <= mask_ratio_high)).to(logprob.dtype)
    loss = aggregate_loss(-keep * rho * adv * logprob, m, loss_agg_mode)
    with torch.no_grad():
        metrics = {
            "pg_loss": float(loss.detach()),
            "ppo_kl": float(masked_mean(-log_ratio, m)),
            "masked_frac": float(masked_mean(1.0 - keep, m)),
            **ratio_summary(rho, m * keep, "is_weight"),
        }
    return loss, metrics
