"""Per-token log-probabilities and entropies of a causal LM: the one definition everyone uses.

The rollout engine reports, the trainer optimises and the tests verify logprobs under exactly
this convention: log_softmax(logits / temperature) in float32 over the unfiltered vocabulary.
The temperature is one number for every row or one per row (sequence): a training batch mixes
experiences sampled at different temperatures, and each is recomputed at its own.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import torch
from torch.utils.checkpoint import checkpoint

DEFAULT_CHUNK_TOKENS = 1024

Temperature: TypeAlias = float | torch.Tensor
"""A scalar for every row, or a [B] tensor: one temperature per row (sequence) of the batch."""


def logprobs_and_entropy_from_logits(
    logits: torch.Tensor, targets: torch.Tensor, temperature: Temperature
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pure math: logits [B, ..., V], targets [B, ...] -> (logprob [B, ...], entropy [B, ...]).

    With T_b the temperature of row b (the scalar, or temperature[b] for a [B] tensor):
    logp[b, ..., v] = log_softmax_v(logits[b, ..., v] / T_b); logprob = logp[target];
    entropy = -sum_v exp(logp_v) * logp_v, the entropy of the distribution at T_b.
    Inputs in float64 stay float64 (for reference tests); lower precisions are raised to float32,
    and a tensor temperature is cast to that dtype too.
    """
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    if isinstance(temperature, torch.Tensor):
        if temperature.dim() != 1 or temperature.shape[0] != logits.shape[0]:
            raise ValueError(
                f"a temperature tensor must be [B] = [{logits.shape[0]}] (one per row), "
                f"got shape {tuple(temperature.shape)}"
            )
        # [B] -> [B, 1, ..., 1]: each row's logits over every position and the vocabulary
        temperature = temperature.to(device=logits.device, dtype=dtype).reshape(
            -1, *([1] * (logits.dim() - 1))
        )
    logp = torch.log_softmax(logits.to(dtype) / temperature, dim=-1)
    picked = logp.gather(-1, targets.unsqueeze(-1).long()).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return picked, entropy


def token_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    temperature: Temperature = 1.0,
    *,
    start: int = 0,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprob of each actual next token and the entropy of each next-token distribution.

    input_ids, attention_mask: [B, T] (any padding side; positions follow the mask).
    Returns (logprobs, entropy), both [B, T-1-start] float32: entry j belongs to predicting token
    `input_ids[:, start + j + 1]` from the prefix before it. `start` lets callers skip prompt
    positions whose logits they don't need (the trainer asks only for the response window).
    temperature: a scalar, or a [B] tensor giving each row its own (finite, > 0).

    Memory: logits are built `chunk_tokens` positions at a time from the final hidden states, and
    under autograd each chunk is recomputed in backward instead of kept, so the [B, T, V] tensor
    never exists at once. Models without a separable head (get_decoder/get_output_embeddings)
    or with logit soft-capping fall back to one full forward.
    """
    values = temperature if isinstance(temperature, torch.Tensor) else torch.tensor(temperature)
    if not bool((torch.isfinite(values) & (values > 0)).all()):
        raise ValueError(f"temperature must be finite and > 0 for logprobs, got {temperature}")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [B, T], got shape {tuple(input_ids.shape)}")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    seq_len = input_ids.shape[1]
    if not 0 <= start < seq_len - 1:
        raise ValueError(f"start={start} leaves no next tokens in a sequence of length {seq_len}")
    targets = input_ids[:, start + 1 :]
    # positions count only attended tokens, so left padding does not shift a sequence:
    # position[b, t] = (sum_{s<=t} mask[b, s]) - 1, clamped at 0 for the pads before the start
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)

    decoder, head = _split_head(model)
    if decoder is None:
        logits = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            use_cache=False,
        ).logits[:, start:-1]
        return logprobs_and_entropy_from_logits(logits, targets, temperature)

    hidden = decoder(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=positions,
        use_cache=False,
    ).last_hidden_state[:, start:-1]

    def chunk_fn(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return logprobs_and_entropy_from_logits(head(h), t, temperature)

    rows = max(1, chunk_tokens // max(1, input_ids.shape[0]))
    pieces_lp: list[torch.Tensor] = []
    pieces_ent: list[torch.Tensor] = []
    use_checkpoint = torch.is_grad_enabled() and hidden.requires_grad
    for lo in range(0, hidden.shape[1], rows):
        h, t = hidden[:, lo : lo + rows], targets[:, lo : lo + rows]
        if use_checkpoint:
            lp, ent = checkpoint(chunk_fn, h, t, use_reentrant=False)
        else:
            lp, ent = chunk_fn(h, t)
        pieces_lp.append(lp)
        pieces_ent.append(ent)
    return torch.cat(pieces_lp, dim=1), torch.cat(pieces_ent, dim=1)


def _split_head(model: Any) -> tuple[Any, Any]:
    """(decoder, lm_head) when logits are exactly lm_head(decoder hidden); else (None, None)."""
    config = getattr(model, "config", None)
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return None, None
    get_decoder = getattr(model, "get_decoder", None)
    get_head = getattr(model, "get_output_embeddings", None)
    if get_decoder is None or get_head is None:
        return None, None
    decoder, head = get_decoder(), get_head()
    if decoder is None or head is None or decoder is model:
        return None, None
    return decoder, head
