"""The loss of a batch that mixes rollouts with demonstrations (`sample_strategy: mix`).

Each row gets its own objective: the algorithm's (policy, KL and entropy terms) on learner rows,
supervised fine-tuning (-log p of the response tokens) on expert rows. Both are reduced by the
same `loss_agg_mode`, each over its own rows, and weighted by the units that mode averages over
(U = action tokens for token-mean, rows with at least one action token otherwise):

    L = (U_rl * L_rl + U_sft * L_sft) / (U_rl + U_sft)
    L_rl  = the algorithm's loss with the expert rows masked out
    L_sft = aggregate_loss(-logprob, action_mask on expert rows, loss_agg_mode)

For token-mean that is the mean over every action token of the batch of its own loss (the RL
surrogate on learner tokens, -log p on demonstration tokens), so micro-batches weighted by their
token share add up to the same loss as the whole batch at once. With no expert row L = L_rl.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rft.algorithms.aggregation import LOSS_AGG_MODES, aggregate_loss
from rft.algorithms.tensor_checks import AlgorithmInputError, require_ndim

RowLoss = Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


def loss_units(mask: torch.Tensor, loss_agg_mode: str) -> float:
    """What `loss_agg_mode` averages over within `mask` [B, T]: tokens for token-mean, else rows
    holding at least one token."""
    if LOSS_AGG_MODES.trait(loss_agg_mode, "averages") == "tokens":
        return float(mask.sum())
    return float((mask.sum(dim=-1) > 0).sum())


def expert_row_loss(
    rl_loss: RowLoss,
    logprob: torch.Tensor,
    action_mask: torch.Tensor,
    expert: torch.Tensor,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """L = (U_rl L_rl + U_sft L_sft) / (U_rl + U_sft) (see the module docstring).

    rl_loss(mask): the algorithm's loss over the tokens of `mask` [B, T] (learner rows only).
    expert: [B] bool (or 0/1), True on demonstration rows.
    Metrics: the RL loss's own, plus sft_loss, expert_units and learner_units.
    """
    require_ndim("logprob", logprob, 2)
    if expert.shape != logprob.shape[:1]:
        raise AlgorithmInputError(
            f"expert mask has shape {tuple(expert.shape)}, expected ({logprob.shape[0]},)"
        )
    rows = expert.to(torch.bool).unsqueeze(-1)
    mask = action_mask.to(logprob.dtype)
    learner_mask = torch.where(rows, torch.zeros_like(mask), mask)
    expert_mask = torch.where(rows, mask, torch.zeros_like(mask))
    u_rl = loss_units(learner_mask, loss_agg_mode)
    u_sft = loss_units(expert_mask, loss_agg_mode)
    metrics: dict[str, float] = {}
    if u_sft == 0:
        return rl_loss(learner_mask)
    sft = aggregate_loss(-logprob, expert_mask, loss_agg_mode)
    total = sft * (u_sft / (u_rl + u_sft))
    if u_rl > 0:
        rl, metrics = rl_loss(learner_mask)
        total = total + rl * (u_rl / (u_rl + u_sft))
    metrics = dict(metrics)
    metrics |= {
        "sft_loss": float(sft.detach()),
        "expert_units": u_sft,
        "learner_units": u_rl,
        "loss": float(total.detach()),
    }
    return total, metrics
