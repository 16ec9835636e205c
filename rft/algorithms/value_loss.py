"""The critic's objective: the clipped value loss of PPO, and how well the values explain returns.

Pure tensor math on [B, T] tensors of one (micro-)batch; the trainer engine's critic calls
`clipped_value_loss` with the values it predicts now (they carry the gradient), the values it
predicted before the step (`old_values`) and the GAE returns (`rft.algorithms.gae`).
"""

from __future__ import annotations

import torch

from rft.algorithms.aggregation import aggregate_loss, masked_mean, token_inputs


def clipped_value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor,
    action_mask: torch.Tensor,
    cliprange_value: float = 0.5,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """L = 0.5 agg_t max((V_t - R_t)^2, (clip(V_t, V_old_t - c, V_old_t + c) - R_t)^2).

    c = `cliprange_value`: a value may not move more than c from the one the advantages were
    computed with before the loss stops rewarding the move (the pessimistic max of the two).
    agg is `loss_agg_mode` over the mask-1 tokens (`rft.algorithms.aggregation`).
    Metrics: vf_loss (L), vf_clipfrac (share of tokens where the clipped term is the larger).
    """
    if not cliprange_value > 0:
        raise ValueError(f"critic.cliprange_value: must be > 0, got {cliprange_value!r}")
    m = token_inputs("values", values, action_mask, returns=returns, old_values=old_values)
    clipped = old_values + (values - old_values).clamp(-cliprange_value, cliprange_value)
    plain_sq = (values - returns) ** 2
    clipped_sq = (clipped - returns) ** 2
    loss = 0.5 * aggregate_loss(torch.maximum(plain_sq, clipped_sq), m, loss_agg_mode)
    clipfrac = masked_mean((clipped_sq > plain_sq).to(values.dtype), m)
    return loss, {"vf_loss": float(loss.detach()), "vf_clipfrac": float(clipfrac)}


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(R - V) / Var(R) over the mask-1 tokens (population variances, in float64).

    1: the values predict the returns exactly; 0: no better than the returns' mean; below 0:
    worse than that. NaN when the returns do not vary (nothing to explain).
    """
    m = mask.to(torch.float64)
    n = m.sum()
    if n == 0:
        return float("nan")
    r = returns.to(torch.float64)
    diff = r - values.to(torch.float64)

    def var(x: torch.Tensor) -> torch.Tensor:
        mean = (x * m).sum() / n
        return (((x - mean) ** 2) * m).sum() / n

    var_r = var(r)
    if var_r == 0:
        return float("nan")
    return float(1.0 - var(diff) / var_r)
