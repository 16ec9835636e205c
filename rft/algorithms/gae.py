"""Advantages from a critic: generalised advantage estimation (GAE) over response tokens.

These are `algorithm.advantage_fn` entries with the trait `critic=True`: instead of sequence
rewards they take token-level rewards and the critic's values of every response token, and they
return the value targets (the returns) beside the advantages, which the critic's loss
(`rft.algorithms.value_loss`) regresses on. Pure tensor math, in float64.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from rft.algorithms.aggregation import token_inputs
from rft.algorithms.tensor_checks import AlgorithmInputError, non_finite_error


class ValueTargets(NamedTuple):
    """What a critic advantage fn returns: token advantages and returns, both [B, T]."""

    advantages: torch.Tensor
    returns: torch.Tensor


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, epsilon: float = 1e-8) -> torch.Tensor:
    """(x - mean) / sqrt(var + epsilon), mean and var over the tokens where mask is 1.

    var is the sample variance (divisor n - 1, n the mask's count), as in verl's and TRL's PPO,
    so advantages compare across libraries; with one token (n = 1) var is taken as 0.
    """
    m = mask.to(values.dtype)
    n = m.sum()
    mean = (values * m).sum() / n.clamp(min=1.0)
    var = (((values - mean) ** 2) * m).sum() / (n - 1).clamp(min=1.0)
    return (values - mean) * torch.rsqrt(var + epsilon)


def gae_advantage(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    action_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten: bool = True,
) -> tuple[ValueTargets, dict[str, float]]:
    """Generalised advantage estimation (Schulman et al. 2016) over each row's response tokens.

    For the tokens t of a row where the mask is 1, in order (tokens with mask 0, the
    environment's or padding, are skipped: they have no value and no TD error; the
    next value and the running sum pass over them):
        delta_t = r_t + gamma V_{t'} - V_t       (t' the next mask-1 token; V after the last = 0)
        A_t     = delta_t + gamma lam A_{t'}     (A after the last = 0)
        R_t     = A_t + V_t                      (the return the critic regresses on)
    With `whiten`, A is then whitened over the batch's mask-1 tokens (`masked_whiten`).
    gamma = lam = 1 (the defaults, Trinity-RFT's and verl's) make A_t = sum_{s >= t} r_s - V_t.
    Rewards and values on mask-0 tokens are ignored. Inputs [B, T]; outputs in float64 in
    the rewards' float dtype (float32 for ints); advantages and returns are 0 where mask is 0.
    """
    for name, value in (("gamma", gamma), ("lam", lam)):
        if not 0.0 <= value <= 1.0:
            raise AlgorithmInputError(f"advantage_fn_args.{name}: must be in [0, 1], got {value!r}")
    r = token_rewards.to(torch.float64)
    v = values.to(torch.float64)
    m = token_inputs("token_rewards", r, action_mask, values=v).to(torch.float64)
    for name, tensor in (("token_rewards", r), ("values", v)):
        if not bool(torch.isfinite(tensor * m).all()):
            raise non_finite_error(name, tensor)
    r, v = r * m, v * m
    next_value = torch.zeros(r.shape[0], dtype=torch.float64, device=r.device)
    running = torch.zeros_like(next_value)
    adv = torch.zeros_like(r)
    for t in reversed(range(r.shape[1])):
        delta = r[:, t] + gamma * next_value - v[:, t]
        here = delta + gamma * lam * running
        on = m[:, t]
        running = on * here + (1 - on) * running
        next_value = on * v[:, t] + (1 - on) * next_value
        adv[:, t] = running
    adv = adv * m
    returns = (adv + v) * m
    metrics = {
        "returns_mean": float(_masked_mean(returns, m)),
        "values_mean": float(_masked_mean(v, m)),
        "advantage_raw_mean": float(_masked_mean(adv, m)),
    }
    if whiten and bool(m.sum() > 0):
        adv = masked_whiten(adv, m) * m
    metrics["advantage_mean"] = float(_masked_mean(adv, m))
    dtype = token_rewards.dtype if token_rewards.dtype.is_floating_point else torch.float32
    return ValueTargets(adv.to(dtype), returns.to(dtype)), metrics


def _masked_mean(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return (x * m).sum() / m.sum().clamp(min=1.0)
