"""Entropy regularisation terms (the `algorithm.entropy_loss_fn` registry, ENTROPY_LOSS_FN).

Signature: `fn(entropy[B, T], action_mask[B, T], loss_agg_mode, entropy_coef)
-> (loss term, metrics)`. Sign convention: the returned term is ADDED to the total loss, so a
bonus for entropy comes back negative (-entropy_coef * H); minimising the total raises entropy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rft.algorithms.aggregation import aggregate_loss
from rft.registry import PartSpec, Registry

EntropyLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class EntropyLossSpec(PartSpec):
    """`reads_entropy`: the term reads the policy's token entropies (the trainer computes them
    only when it does)."""

    reads_entropy: bool = True


ENTROPY_LOSS_FN: Registry[EntropyLossFn, EntropyLossSpec] = Registry(
    "algorithm.entropy_loss_fn", EntropyLossSpec
)


# `reads_entropy`: whether the term needs token entropy (the trainer computes it only then)
@ENTROPY_LOSS_FN.register("default", reads_entropy=True)
def entropy_bonus(
    entropy: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    entropy_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Entropy bonus: term = -entropy_coef * aggregate_loss(H, mask, loss_agg_mode)."""
    h = aggregate_loss(entropy, action_mask, loss_agg_mode)
    term = -entropy_coef * h
    return term, {"entropy": float(h.detach()), "entropy_loss": float(term.detach())}


@ENTROPY_LOSS_FN.register("none", reads_entropy=False)
def entropy_none(
    entropy: torch.Tensor | None,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    entropy_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """No entropy term: 0. `entropy` may be None so the trainer can skip computing it."""
    return torch.zeros((), device=action_mask.device), {}
