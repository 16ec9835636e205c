"""Token matrices [B, T] under a 0/1 action mask: their checks, and their reduction to a scalar
by `loss_agg_mode`.

Every policy, KL and entropy loss checks its token inputs here (`token_inputs`)
and reduces through `aggregate_loss`, so one config key (`loss_agg_mode`) decides how tokens and
sequences are weighted across all loss terms.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from rft.algorithms.tensor_checks import AlgorithmInputError, ndim_error, shape_error
from rft.registry import PartSpec, Registry

AggregateFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class LossAggSpec(PartSpec):
    """`averages`: what the mode's mean is over, "tokens" (token-mean) or "rows" (the
    seq-mean modes); expert rows are weighed by the same unit."""

    averages: Literal["tokens", "rows"] = "rows"


LOSS_AGG_MODES: Registry[AggregateFn, LossAggSpec] = Registry(
    "algorithm.loss_agg_mode", LossAggSpec
)


def token_inputs(
    like_name: str, like: torch.Tensor, action_mask: torch.Tensor, **same_shape: torch.Tensor
) -> torch.Tensor:
    """One check of a token-level function's inputs: `like` is [B, T], every `same_shape`
    tensor has its shape, and `action_mask` is a 0/1 (bool, integer or float) mask of that
    shape; returns the mask in like's dtype."""
    if like.dim() != 2:
        raise ndim_error(like_name, like, 2)
    for name, tensor in (*same_shape.items(), ("action_mask", action_mask)):
        if tensor.shape != like.shape:
            raise shape_error(name, like.shape, tensor.shape)
    if action_mask.dtype != torch.bool:
        values = action_mask if action_mask.dtype.is_floating_point else action_mask.double()
        if bool(((values != 0) & (values != 1)).any()):
            raise AlgorithmInputError("action_mask: mask values must be 0 or 1")
    return action_mask.to(like.dtype)


# A mode's reducer is looked up in the registry once per process, not on every micro-batch; a
# mode re-registered with replace=True after its first use keeps its first reducer here.
_reducer = functools.cache(LOSS_AGG_MODES.get)


def aggregate_loss(
    loss_mat: torch.Tensor, mask: torch.Tensor, loss_agg_mode: str = "token-mean"
) -> torch.Tensor:
    """Reduce `loss_mat` [B, T] over the tokens where `mask` [B, T] is 1, by `loss_agg_mode`.

    Modes (m = mask, l = loss_mat, B' = number of rows with at least one unmasked token):
      token-mean:              sum_bt l*m / sum_bt m
      seq-mean-token-sum:      (1/B') sum_b sum_t l*m
      seq-mean-token-mean:     (1/B') sum_b (sum_t l*m / sum_t m)
      seq-mean-token-sum-norm: (1/B') sum_b (sum_t l*m) / T   (T = mask.shape[-1], a constant
                               length normaliser as in Dr. GRPO)
    Rows that are fully masked carry no tokens and are left out of every mean; when no token is
    unmasked at all the result is 0 (with a gradient path), never NaN.
    """
    m = token_inputs("loss_mat", loss_mat, mask)
    return _reducer(loss_agg_mode)(loss_mat, m)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum(values * mask) / sum(mask), or 0 when the mask is empty.

    `torch.where` on the product (not on the values) keeps NaN/inf in masked-out positions from
    reaching the result or its gradient.
    """
    m = mask.to(values.dtype)
    total = torch.where(m > 0, values * m, torch.zeros_like(values)).sum()
    return total / m.sum().clamp(min=1.0)


def _masked_row_sums(loss_mat: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return torch.where(m > 0, loss_mat * m, torch.zeros_like(loss_mat)).sum(dim=-1)


# `averages`: what a mode averages over within the mask, tokens or rows (sequences)
LOSS_AGG_MODES.add("token-mean", masked_mean, averages="tokens")


@LOSS_AGG_MODES.register("seq-mean-token-sum", averages="rows")
def _seq_mean_token_sum(loss_mat: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    rows = (m.sum(dim=-1) > 0).to(loss_mat.dtype)
    return (_masked_row_sums(loss_mat, m) * rows).sum() / rows.sum().clamp(min=1.0)


@LOSS_AGG_MODES.register("seq-mean-token-mean", averages="rows")
def _seq_mean_token_mean(loss_mat: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    counts = m.sum(dim=-1)
    rows = (counts > 0).to(loss_mat.dtype)
    per_row = _masked_row_sums(loss_mat, m) / counts.clamp(min=1.0)
    return (per_row * rows).sum() / rows.sum().clamp(min=1.0)


@LOSS_AGG_MODES.register("seq-mean-token-sum-norm", averages="rows")
def _seq_mean_token_sum_norm(loss_mat: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    horizon = max(loss_mat.shape[-1], 1)
    rows = (m.sum(dim=-1) > 0).to(loss_mat.dtype)
    per_row = _masked_row_sums(loss_mat, m) / horizon
    return (per_row * rows).sum() / rows.sum().clamp(min=1.0)
