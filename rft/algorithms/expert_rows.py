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

Trinity-RFT's `mix` algorithm (policy loss `mix`, its arg `mu`) weighs the two kinds by a fixed
μ instead of by their units, each kind averaged over its own rows of the whole batch:

    L_mix = (1 - μ) L_rl + μ L_sft    (a kind with no units in the batch adds nothing)

A micro-batch k sees only its own rows, so `mixed_loss` scales its parts by the micro-batch's
share of each kind's batch units (BatchUnits, filled by the trainer engine) and divides by the
weight the engine gives the micro-batch: the engine's weighted sum is then exactly L_mix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rft.algorithms.aggregation import LOSS_AGG_MODES, aggregate_loss
from rft.algorithms.tensor_checks import AlgorithmInputError, require_ndim

RowLoss = Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


def loss_units(mask: torch.Tensor, loss_agg_mode: str) -> float:
    """What `loss_agg_mode` averages over within `mask` [B, T]: tokens for token-mean, else rows
    holding at least one token."""
    if LOSS_AGG_MODES.spec(loss_agg_mode).averages == "tokens":
        return float(mask.sum())
    return float((mask.sum(dim=-1) > 0).sum())


def split_masks(
    logprob: torch.Tensor, action_mask: torch.Tensor, expert: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`action_mask` [B, T] as (learner rows' part, expert rows' part), in logprob's dtype."""
    require_ndim("logprob", logprob, 2)
    if expert.shape != logprob.shape[:1]:
        raise AlgorithmInputError(
            f"expert mask has shape {tuple(expert.shape)}, expected ({logprob.shape[0]},)"
        )
    rows = expert.to(torch.bool).unsqueeze(-1)
    mask = action_mask.to(logprob.dtype)
    return (
        torch.where(rows, torch.zeros_like(mask), mask),
        torch.where(rows, mask, torch.zeros_like(mask)),
    )


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
    learner_mask, expert_mask = split_masks(logprob, action_mask, expert)
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


@dataclass(frozen=True)
class BatchUnits:
    """Action tokens, and rows holding at least one, of a whole batch, learner and expert."""

    learner_tokens: float = 0.0
    expert_tokens: float = 0.0
    learner_rows: float = 0.0
    expert_rows: float = 0.0

    @classmethod
    def of(cls, action_masks: Sequence[Any], expert: Any) -> BatchUnits:
        """The units of a batch's rows (`action_masks`: one 0/1 sequence per row; `expert`: one
        flag per row, or None when every row is a learner's)."""
        counts = [float(np.sum(np.asarray(m))) for m in action_masks]
        kinds = [bool(e) for e in expert] if expert is not None else [False] * len(counts)
        return cls(
            learner_tokens=sum(c for c, e in zip(counts, kinds, strict=True) if not e),
            expert_tokens=sum(c for c, e in zip(counts, kinds, strict=True) if e),
            learner_rows=float(sum(1 for c, e in zip(counts, kinds, strict=True) if c and not e)),
            expert_rows=float(sum(1 for c, e in zip(counts, kinds, strict=True) if c and e)),
        )

    def units(self, loss_agg_mode: str) -> tuple[float, float]:
        """(learner, expert) units of `loss_agg_mode` (see `loss_units`)."""
        if LOSS_AGG_MODES.spec(loss_agg_mode).averages == "tokens":
            return self.learner_tokens, self.expert_tokens
        return self.learner_rows, self.expert_rows


def mixed_loss(
    rl_loss: RowLoss,
    logprob: torch.Tensor,
    action_mask: torch.Tensor,
    expert: torch.Tensor,
    mu: float,
    loss_agg_mode: str = "token-mean",
    batch: BatchUnits | None = None,
    share: float = 1.0,
    *,
    sft_token_losses: Callable[[torch.Tensor], torch.Tensor] | None = None,
    sft_agg_mode: str | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """This micro-batch's part of L_mix = (1 - μ) L_rl + μ L_sft (see the module docstring).

    batch: the units of the whole batch (None: this micro-batch is the batch); share: the weight
    the engine gives this micro-batch's loss. sft_token_losses: each demonstration token's loss
    from its logprob (default -logprob; CHORD's φ-weighted one, rft.algorithms.chord), averaged
    by sft_agg_mode (default loss_agg_mode). Metrics: the RL loss's own, plus sft_loss and mu.
    """
    sft_mode = sft_agg_mode or loss_agg_mode
    learner_mask, expert_mask = split_masks(logprob, action_mask, expert)
    u_rl, u_sft = loss_units(learner_mask, loss_agg_mode), loss_units(expert_mask, sft_mode)
    if batch is None:
        total_rl, total_sft = u_rl, u_sft
    else:
        total_rl, total_sft = batch.units(loss_agg_mode)[0], batch.units(sft_mode)[1]
    if share <= 0:  # the engine gives this micro-batch no weight: it holds no units
        return (logprob * 0.0).sum(), {}
    total = (logprob * 0.0).sum()
    metrics: dict[str, float] = {}
    if u_rl > 0:
        rl, metrics = rl_loss(learner_mask)
        metrics = dict(metrics)
        total = total + (1.0 - mu) * rl * (u_rl / total_rl) / share
    if u_sft > 0:
        token_losses = -logprob if sft_token_losses is None else sft_token_losses(logprob)
        sft = aggregate_loss(token_losses, expert_mask, sft_mode)
        total = total + mu * sft * (u_sft / total_sft) / share
        metrics["sft_loss"] = float(sft.detach())
    metrics |= {"mu": float(mu), "loss": float(total.detach())}
    return total, metrics
