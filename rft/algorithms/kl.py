"""KL divergence between the trained policy and a reference policy: token estimators and losses.

`kl_estimate(kind, logprob, ref_logprob)` gives a per-token estimate [B, T] of KL(pi || pi_ref)
from the log-probabilities of the sampled tokens. The `algorithm.kl_loss_fn` registry (KL_FN)
reduces it to a loss term; `apply_kl_penalty` subtracts it from rewards (`kl_penalty_fn`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rft.algorithms.aggregation import aggregate_loss, masked_mean, token_inputs
from rft.algorithms.tensor_checks import require_shape
from rft.registry import PartSpec, Registry

KlEstimator = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KlLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class KlSpec(PartSpec):
    """`zero`: the estimator (or the loss built on it) is identically zero ("none"), so nothing
    reads the reference model for it."""

    zero: bool = False


KL_ESTIMATORS: Registry[KlEstimator, KlSpec] = Registry("algorithm.kl_estimator", KlSpec)
KL_FN: Registry[KlLossFn, KlSpec] = Registry("algorithm.kl_loss_fn", KlSpec)

# Bounds used by "low_var_kl": the log-ratio is clamped before exp() so one outlier token cannot
# overflow, and the estimate is clamped so one token cannot dominate the loss or its gradient.
LOW_VAR_KL_LOG_RATIO_BOUND = 20.0
LOW_VAR_KL_VALUE_BOUND = 10.0


# `zero`: the estimate is 0 everywhere, so no reference model is needed for it
@KL_ESTIMATORS.register("none", zero=True)
def kl_none(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    """No KL: 0 everywhere."""
    return torch.zeros_like(logprob)


@KL_ESTIMATORS.register("k1")
def kl_k1(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    """k1 = log p - log q (unbiased, high variance, can be negative). p = policy, q = reference."""
    return logprob - ref_logprob


@KL_ESTIMATORS.register("abs")
def kl_abs(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    """|log p - log q|."""
    return (logprob - ref_logprob).abs()


@KL_ESTIMATORS.register("k2")
def kl_k2(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    """k2 = 0.5 (log p - log q)^2 (biased, low variance, >= 0)."""
    return 0.5 * (logprob - ref_logprob) ** 2


@KL_ESTIMATORS.register("k3")
def kl_k3(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    """k3 = exp(log q - log p) - (log q - log p) - 1 (unbiased, low variance, >= 0). Unclamped."""
    d = ref_logprob - logprob
    return torch.exp(d) - d - 1.0


@KL_ESTIMATORS.register("low_var_kl")
def kl_low_var(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    """k3 with clamps: d = clamp(log q - log p, -20, 20); clamp(exp(d) - d - 1, -10, 10).

    The clamps trade a little bias on extreme tokens for a bounded loss and gradient.
    """
    d = (ref_logprob - logprob).clamp(-LOW_VAR_KL_LOG_RATIO_BOUND, LOW_VAR_KL_LOG_RATIO_BOUND)
    return (torch.exp(d) - d - 1.0).clamp(-LOW_VAR_KL_VALUE_BOUND, LOW_VAR_KL_VALUE_BOUND)


def kl_estimate(kind: str, logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    """Per-token KL estimate [B, T] of kind `kind` (a name in KL_ESTIMATORS)."""
    estimator = KL_ESTIMATORS.get(kind)
    require_shape("ref_logprob", ref_logprob, logprob.shape)
    return estimator(logprob, ref_logprob)


def kl_loss_from_estimator(kind: str) -> KlLossFn:
    """Build the KL_FN entry for estimator `kind`: loss = aggregate(kl_estimate(kind), mask)."""
    estimator: KlEstimator | None = None  # looked up in the registry on the first call only

    def kl_loss(
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
    ) -> tuple[torch.Tensor, dict[str, float]]:
        nonlocal estimator
        m = token_inputs("logprob", logprob, action_mask, ref_logprob=ref_logprob)
        if estimator is None:
            estimator = KL_ESTIMATORS.get(kind)
        kl = estimator(logprob, ref_logprob)
        loss = aggregate_loss(kl, m, loss_agg_mode)
        return loss, {
            "kl_loss": float(loss.detach()),
            "kl_token_mean": float(masked_mean(kl.detach(), m)),
        }

    kl_loss.__name__ = f"kl_loss_{kind}"
    kl_loss.__doc__ = f"KL loss: aggregate_loss(kl_estimate({kind!r}, logprob, ref), mask, mode)."
    return kl_loss


def register_kl_estimator(name: str) -> Callable[[KlEstimator], KlEstimator]:
    """Decorator adding a token estimator under `name` to KL_ESTIMATORS and its loss to KL_FN."""

    def decorate(fn: KlEstimator) -> KlEstimator:
        KL_ESTIMATORS.add(name, fn)
        KL_FN.add(name, kl_loss_from_estimator(name), zero=KL_ESTIMATORS.spec(name).zero)
        return fn

    return decorate


for _kind in KL_ESTIMATORS.names():
    KL_FN.add(_kind, kl_loss_from_estimator(_kind), zero=KL_ESTIMATORS.spec(_kind).zero)


def apply_kl_penalty(
    rewards: torch.Tensor,
    logprob: torch.Tensor,
    ref_logprob: torch.Tensor,
    action_mask: torch.Tensor,
    kl_penalty_fn: str = "none",
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Fold a KL penalty into sequence rewards before advantages are computed.

    r'_b = r_b - kl_coef * sum_t mask[b, t] * kl_estimate(kl_penalty_fn)[b, t]
    The estimate is taken without gradient: it changes the reward, not the loss graph.
    """
    m = token_inputs("logprob", logprob, action_mask)
    require_shape("rewards", rewards, (logprob.shape[0],))
    with torch.no_grad():
        kl = KL_ESTIMATORS.get(kl_penalty_fn, key="algorithm.kl_penalty_fn")(logprob, ref_logprob)
        per_seq = torch.where(m > 0, kl * m, torch.zeros_like(kl)).sum(dim=-1)
    penalised = rewards - kl_coef * per_seq.to(rewards.dtype)
    return penalised, {
        "kl_penalty_seq_mean": float(per_seq.mean()) if per_seq.numel() else 0.0,
        "kl_penalty_coef": float(kl_coef),
    }
