"""Token-level quantities computed from model logits: chosen-token log-probabilities and entropy.

These sit between the trainer engine's forward pass ([B, T, V] logits) and the losses ([B, T]).
"""

from __future__ import annotations

import torch

from rft.algorithms.tensor_checks import require_ndim, require_shape


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """log pi(y_t | ...) = logits[b, t, y_t] - logsumexp_v logits[b, t, v]; shape [B, T]."""
    require_ndim("logits", logits, 3)
    require_shape("token_ids", token_ids, logits.shape[:2])
    chosen = logits.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1)
    return chosen - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """H_t = logsumexp(z) - sum_v softmax(z)_v z_v = -sum_v p_v log p_v; shape [B, T]."""
    require_ndim("logits", logits, 3)
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)
