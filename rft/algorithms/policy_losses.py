"""Policy-gradient losses (the `algorithm.policy_loss_fn` registry, POLICY_LOSS_FN).

Signature of every entry: `fn(logprob[B, T], old_logprob[B, T], advantages[B, T],
action_mask[B, T], loss_agg_mode, **policy_loss_fn_args) -> (loss scalar, metrics)`.
`logprob` carries the gradient; `old_logprob` is what the rollout (behaviour) policy gave the same
tokens, as each Experience carries it. A loss that also needs the proximal policy (the weights
before this optimizer step: `rft.algorithms.off_policy_losses`) declares a keyword parameter
`prox_logprob`; `AlgorithmLoss` fills it and it is never a config arg.

This module holds the PPO family and the plain losses; the off-policy corrections (decoupled
PPO, TIS, masked IS) and the named algorithms' surrogates (GSPO, CISPO, TOPR, SAPO) register
from their own modules, imported at the end of this one so the registry is always complete.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from rft.algorithms.aggregation import aggregate_loss, masked_mean, token_inputs
from rft.algorithms.tensor_checks import AlgorithmInputError, require_ndim
from rft.registry import PartSpec, Registry

PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class PolicyLossSpec(PartSpec):
    """What a policy loss's entry declares.

    - `paired`: it pairs adjacent rows (a chosen and a rejected response), so micro-batches and
      batches hold whole pairs (dpo);
    - `reads_reference`: it reads the reference model's logprobs itself (`ref_logprob`);
    - `accumulation`: "sequence" when its micro-batch losses weigh by rows, not by tokens (a mean
      over pairs); None: by tokens;
    - `expert_weight`: the argument that weighs demonstration rows by a fixed number (mix's mu;
      rft.algorithms.objective applies it across the batch);
    - `expert_schedule`: the dotted path of the function that turns its args into a weighting
      scheduled by the step (mix_chord's μ).
    """

    paired: bool = False
    reads_reference: bool = False
    accumulation: Literal["sequence"] | None = None
    expert_weight: str | None = None
    expert_schedule: str | None = None


POLICY_LOSS_FN: Registry[PolicyLossFn, PolicyLossSpec] = Registry(
    "algorithm.policy_loss_fn", PolicyLossSpec
)

# exp() of a log-ratio beyond this bound overflows float32 long before it means anything.
LOG_RATIO_BOUND = 20.0


def checked_inputs(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor | None,
    advantages: torch.Tensor | None,
    action_mask: torch.Tensor,
    loss_name: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if old_logprob is None or advantages is None:
        raise AlgorithmInputError(
            f"policy_loss_fn {loss_name!r} needs old_logprob and advantages for every token"
        )
    m = token_inputs(
        "logprob", logprob, action_mask, old_logprob=old_logprob, advantages=advantages
    )
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
    old, adv, m = checked_inputs(logprob, old_logprob, advantages, action_mask, "ppo")
    low, high = clip_bounds(clip_range, clip_range_low, clip_range_high)
    log_ratio = (logprob - old).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    surrogate = clipped_surrogate(ratio, adv, low, high, clip_ratio_c)
    loss = aggregate_loss(surrogate.loss, m, loss_agg_mode)
    metrics = surrogate.metrics(m)
    with torch.no_grad():
        metrics.update(
            {
                "pg_loss": float(loss.detach()),
                "ppo_kl": float(masked_mean(-log_ratio, m)),
                **ratio_summary(ratio, m),
            }
        )
    return loss, metrics


def clip_bounds(
    clip_range: float, clip_range_low: float | None, clip_range_high: float | None
) -> tuple[float, float]:
    """(eps_low, eps_high): the asymmetric ranges, each defaulting to clip_range."""
    low = clip_range if clip_range_low is None else clip_range_low
    high = clip_range if clip_range_high is None else clip_range_high
    if not (0 <= low < 1 and high >= 0):
        raise AlgorithmInputError(
            f"policy_loss_fn_args: need 0 <= clip_range_low < 1 and clip_range_high >= 0, "
            f"got low={low!r} high={high!r}"
        )
    return low, high


@dataclass(frozen=True)
class ClippedSurrogate:
    """Token losses of the PPO-clip surrogate, with which branch each token took."""

    loss: torch.Tensor
    clipped: torch.Tensor  # bool: the clipped branch is the max
    dual_clipped: torch.Tensor | None  # bool: cut by the dual clip (None: no dual clip)

    def metrics(self, mask: torch.Tensor) -> dict[str, float]:
        with torch.no_grad():
            out = {"pg_clipfrac": float(masked_mean(self.clipped.to(mask.dtype), mask))}
            if self.dual_clipped is not None:
                out["pg_clipfrac_lower"] = float(
                    masked_mean(self.dual_clipped.to(mask.dtype), mask)
                )
        return out


def clipped_surrogate(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    low: float,
    high: float,
    clip_ratio_c: float | None = None,
) -> ClippedSurrogate:
    """L_t = max(-A_t rho_t, -A_t clip(rho_t, 1 - low, 1 + high)); with clip_ratio_c = c > 1,
    tokens with A_t < 0 use min(L_t, -A_t c) (dual clip)."""
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - low, 1.0 + high)
    loss = torch.maximum(unclipped, clipped)
    dual_cut = None
    if clip_ratio_c is not None:
        if not clip_ratio_c > 1.0:
            raise AlgorithmInputError(
                f"policy_loss_fn_args.clip_ratio_c: must be > 1, got {clip_ratio_c!r}"
            )
        lower = -adv * clip_ratio_c
        dual = torch.where(adv < 0, torch.minimum(loss, lower), loss)
        dual_cut = (dual < loss) & (adv < 0)
        loss = dual
    return ClippedSurrogate(loss, clipped > unclipped, dual_cut)


def ratio_summary(
    ratio: torch.Tensor, mask: torch.Tensor, prefix: str = "ratio"
) -> dict[str, float]:
    """Mean, min and max of `ratio` over the unmasked tokens (1.0 when there are none)."""
    with torch.no_grad():
        values = ratio[mask > 0]
        if not values.numel():
            return {f"{prefix}_mean": 1.0, f"{prefix}_min": 1.0, f"{prefix}_max": 1.0}
        return {
            f"{prefix}_mean": float(values.mean()),
            f"{prefix}_min": float(values.min()),
            f"{prefix}_max": float(values.max()),
        }


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


@POLICY_LOSS_FN.register("mix", expert_weight="mu")
def mix_policy_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    mu: float = 0.1,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Trinity-RFT's `mix`: the PPO-clip surrogate on the rollout rows; `mu` is the weight of the
    demonstration rows' SFT loss against it, (1 - mu) L_ppo + mu L_sft over the whole batch. The
    objective applies it (its trait `expert_weight` names the arg; rft.algorithms.expert_rows),
    so this function sees learner rows only and `mu` is not used here."""
    return ppo_policy_loss(
        logprob,
        old_logprob,
        advantages,
        action_mask,
        loss_agg_mode,
        clip_range=clip_range,
        clip_range_low=clip_range_low,
        clip_range_high=clip_range_high,
        clip_ratio_c=clip_ratio_c,
    )


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
    old, adv, m = checked_inputs(logprob, old_logprob, advantages, action_mask, "opmd")
    if not tau > 0:
        raise AlgorithmInputError(f"policy_loss_fn_args.tau: must be > 0, got {tau!r}")
    loss = aggregate_loss(-adv * logprob, m, loss_agg_mode) / (1.0 + tau)
    return loss, {
        "pg_loss": float(loss.detach()),
        "ppo_kl": float(masked_mean((old - logprob).detach(), m)),
    }


# The other loss families, declared here by dotted path: their modules import this one, and
# every user of the registry sees every loss.
for _name, _target in (
    ("decoupled_ppo", "off_policy_losses:decoupled_ppo_loss"),
    ("tis", "off_policy_losses:truncated_is_loss"),
    ("masked_is", "off_policy_losses:masked_is_loss"),
    ("gspo", "surrogate_losses:gspo_loss"),
    ("cispo", "surrogate_losses:cispo_loss"),
    ("topr", "surrogate_losses:topr_loss"),
    ("sapo", "surrogate_losses:sapo_loss"),
):
    POLICY_LOSS_FN.lazy(_name, f"rft.algorithms.{_target}")
# DPO reads the reference model's logprobs (AlgorithmLoss passes `ref_logprob`) and pairs
# adjacent rows, so a micro-batch must hold whole pairs
POLICY_LOSS_FN.lazy(
    "dpo",
    "rft.algorithms.preference_losses:dpo_loss",
    check="rft.algorithms.preference_losses:pairing_issues",
    reads_reference=True,
    paired=True,
    accumulation="sequence",  # a mean over pairs: micro-batches weigh by rows
)
# CHORD: `mix` with a scheduled μ and a φ-weighted SFT loss; its trait `expert_schedule` names
# the function that turns its args into that weighting (rft.algorithms.objective applies it)
POLICY_LOSS_FN.lazy(
    "mix_chord",
    "rft.algorithms.chord:mix_chord_policy_loss",
    expert_schedule="rft.algorithms.chord:chord_weighting",
)
