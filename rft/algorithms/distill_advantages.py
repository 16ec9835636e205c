"""Token advantages from a teacher's log-probabilities of the student's own samples (Trinity-RFT's
`on_policy_distill` and `jsd` advantage functions).

Entries here carry the ADVANTAGE_FN trait `teacher=True`: their signature is
`fn(old_logprob[B, T], teacher_logprob[B, T], action_mask[B, T], **advantage_fn_args)
-> (advantages[B, T], metrics)`, where old_logprob is what the student gave each sampled token when
it was rolled out (the Experience's logprobs) and teacher_logprob what the teacher gives the same
token in the same context, at the same temperature. The trainer computes teacher_logprob with its
frozen teacher model (rft.engines.trainer.fill_advantages); the rewards play no part.

Both are sampled-token estimates: each token's term uses the two models' log-probabilities of the
token the student drew, never their whole distributions. Computed in float64; the result has
old_logprob's float dtype, 0 off the mask.
"""

from __future__ import annotations

import math

import torch

from rft.algorithms.aggregation import token_inputs
from rft.algorithms.tensor_checks import AlgorithmInputError, non_finite_error


def _checked(
    old_logprob: torch.Tensor, teacher_logprob: torch.Tensor, action_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(student, teacher, mask) in float64, shapes and finiteness checked on the masked tokens."""
    m = token_inputs("old_logprob", old_logprob, action_mask, teacher_logprob=teacher_logprob)
    s, t, m = old_logprob.double(), teacher_logprob.double(), m.double()
    on = m > 0
    for name, x in (("old_logprob", s), ("teacher_logprob", t)):
        if not bool(torch.isfinite(x[on]).all()):
            raise non_finite_error(name, x[on])
    # off-mask entries may be padding of any value: zero them before they meet exp/logsumexp
    return torch.where(on, s, 0.0), torch.where(on, t, 0.0), m


def _sequence_stats(prefix: str, per_token: torch.Tensor, adv: torch.Tensor) -> dict[str, float]:
    """Mean and std (population) over rows of the per-sequence sum of `per_token`, and the mean
    per-sequence sum of the advantages."""
    sums = per_token.sum(dim=-1)
    if sums.numel() == 0:
        return {f"{prefix}_mean": 0.0, f"{prefix}_std": 0.0, "advantage_mean": 0.0}
    return {
        f"{prefix}_mean": float(sums.mean()),
        f"{prefix}_std": float(sums.std(unbiased=False)),
        "advantage_mean": float(adv.sum(dim=-1).mean()),
    }


def on_policy_distill_advantage(
    old_logprob: torch.Tensor,
    teacher_logprob: torch.Tensor,
    action_mask: torch.Tensor,
    kl_coef: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """On-policy distillation: the negated per-token reverse KL estimate.

    A_t = kl_coef * (log p_teacher(y_t) - log p_student(y_t)) * mask_t
    With the PPO surrogate this is a policy gradient on -KL(student || teacher) sampled at the
    student's tokens: tokens the teacher finds likelier than the student did are pushed up.
    Metrics: kl_mean / kl_std over rows of sum_t (log p_student - log p_teacher) mask_t, and
    advantage_mean (mean over rows of sum_t A_t).
    """
    s, t, m = _checked(old_logprob, teacher_logprob, action_mask)
    adv = kl_coef * (t - s) * m
    return adv.to(_dtype(old_logprob)), _sequence_stats("kl", (s - t) * m, adv)


def jsd_advantage(
    old_logprob: torch.Tensor,
    teacher_logprob: torch.Tensor,
    action_mask: torch.Tensor,
    lambda_coef: float = 0.5,
    kl_coef: float = 1.0,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Generalised Jensen-Shannon divergence, per sampled token, as a negated advantage.

    With s = log p_student(y_t) / temperature, t = log p_teacher(y_t) / temperature and
    β = lambda_coef, the mixture's log-probability is log m = log(β e^t + (1 - β) e^s) and
        JSD_t = β (t - log m) + (1 - β) (s - log m)          (0 < β < 1)
        JSD_t = s - t  (β = 0, KL(student || teacher)),   JSD_t = t - s  (β = 1)
        A_t = -kl_coef * JSD_t * mask_t
    Everything stays in log space (log m by logsumexp). Metrics: jsd_mean / jsd_std over rows of
    sum_t JSD_t mask_t, and advantage_mean.
    """
    if not 0.0 <= lambda_coef <= 1.0:
        raise AlgorithmInputError(
            f"advantage_fn_args.lambda_coef: must be in [0, 1], got {lambda_coef!r}"
        )
    if not temperature > 0:
        raise AlgorithmInputError(
            f"advantage_fn_args.temperature: must be > 0, got {temperature!r}"
        )
    s, t, m = _checked(old_logprob, teacher_logprob, action_mask)
    s, t = s / temperature, t / temperature
    if lambda_coef == 0.0:
        jsd = s - t
    elif lambda_coef == 1.0:
        jsd = t - s
    else:
        log_m = torch.logsumexp(
            torch.stack([t + math.log(lambda_coef), s + math.log1p(-lambda_coef)]), dim=0
        )
        jsd = lambda_coef * (t - log_m) + (1.0 - lambda_coef) * (s - log_m)
    jsd = jsd * m
    adv = -kl_coef * jsd
    return adv.to(_dtype(old_logprob)), _sequence_stats("jsd", jsd, adv)


def _dtype(like: torch.Tensor) -> torch.dtype:
    return like.dtype if like.dtype.is_floating_point else torch.float32
