"""What the hf rollout engine adds to transformers `generate` beyond its GenerationConfig: a
repetition penalty that sees each row's own tokens only, and a stop at a wall-clock deadline.

Both are plain transformers hooks (a `LogitsProcessor`, a `StoppingCriteria`) so that the engine
decides their order relative to its logprob recorder.
"""

from __future__ import annotations

import time

import torch
from transformers import LogitsProcessor, StoppingCriteria


class RowRepetitionPenalty(LogitsProcessor):
    """Penalise every token already present in a row, prompt included, left padding excluded.

    For each token v seen in row b: logit[b, v] / p where it is positive, logit[b, v] * p where it
    is not (p > 1 discourages repeats, p < 1 encourages them). transformers' own processor counts
    the pad tokens of left-padded rows, so a row's sampling would depend on its batch-mates'
    lengths; here `starts[b]` (the first real position of row b) keeps pads out.
    """

    def __init__(self, penalty: float, starts: torch.Tensor) -> None:
        """`starts`: [B] long, on the device of the input ids."""
        if penalty <= 0:
            raise ValueError(f"repetition penalty must be > 0, got {penalty}")
        self.penalty = penalty
        self.starts = starts

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        real = (positions[None, :] >= self.starts[:, None]).to(torch.int32)
        # scatter_add, not scatter: a token id can sit at a pad and at a real position at once
        counts = torch.zeros(scores.shape, dtype=torch.int32, device=scores.device)
        counts.scatter_add_(1, input_ids, real)
        penalised = torch.where(scores > 0, scores / self.penalty, scores * self.penalty)
        return torch.where(counts > 0, penalised, scores)


class DeadlineStop(StoppingCriteria):
    """Ends every row of a batched `generate` once `time.monotonic()` reaches `deadline`.

    It is checked after each generated token, so a call overruns its deadline by at most one
    forward pass (the prompt's prefill cannot be cut). `fired` tells the engine that rows which
    ended without eos ran out of time rather than out of tokens.
    """

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False

    def __call__(
        self, input_ids: torch.Tensor, scores: torch.Tensor | None = None, **kwargs: object
    ) -> torch.Tensor:
        if not self.fired and time.monotonic() >= self.deadline:
            self.fired = True
        return torch.full(
            (input_ids.shape[0],), self.fired, dtype=torch.bool, device=input_ids.device
        )
