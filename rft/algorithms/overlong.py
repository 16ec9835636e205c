"""DAPO's soft overlong punishment: a reward penalty for responses that run into the length limit.

A response cut at the limit is not necessarily wrong, and a hard -1 for it would punish
reasoning that was merely long. DAPO (arXiv:2503.14476, eq. 13) ramps the penalty in over the
last `cache_length` tokens before the limit instead. `compute_advantages` adds it to the sequence
rewards before the advantage fn when an algorithm's `overlong_penalty` args are set (the `dapo`
preset sets them).
"""

from __future__ import annotations

import torch

from rft.algorithms.tensor_checks import AlgorithmInputError, require_ndim

# DAPO's setting: a 4,096-token ramp before a 20,480-token limit, i.e. the last fifth
DEFAULT_CACHE_FRACTION = 0.2


def overlong_penalty(
    response_lengths: torch.Tensor,
    max_response_length: int,
    cache_length: int | None = None,
    penalty_factor: float = 1.0,
) -> torch.Tensor:
    """Per-sequence penalty (<= 0) for `response_lengths` [N], in float64.

    With L = max_response_length, C = cache_length (default L/5, DAPO's ratio), |y| a length:
      R(y) = 0                          if |y| <= L - C
      R(y) = ((L - C) - |y|) / C        if L - C < |y| <= L
      R(y) = -1                         if |y| > L
    and the penalty is penalty_factor * R(y). A response that stops exactly at L gets -1 + 0 =
    -1 through the ramp as well: the two cases meet there.
    """
    require_ndim("response_lengths", response_lengths, 1)
    if isinstance(max_response_length, bool) or not max_response_length >= 1:
        raise AlgorithmInputError(
            f"overlong_penalty.max_response_length: must be >= 1, got {max_response_length!r}"
        )
    cache = (
        max(1, int(round(max_response_length * DEFAULT_CACHE_FRACTION)))
        if cache_length is None
        else cache_length
    )
    if not 1 <= cache <= max_response_length:
        raise AlgorithmInputError(
            f"overlong_penalty.cache_length: must be in [1, max_response_length = "
            f"{max_response_length}], got {cache!r}"
        )
    lengths = response_lengths.to(torch.float64)
    expected = float(max_response_length - cache)
    ramp = (expected - lengths) / cache
    penalty = torch.where(
        lengths <= expected,
        torch.zeros_like(lengths),
        torch.where(lengths <= max_response_length, ramp, torch.full_like(lengths, -1.0)),
    )
    return penalty_factor * penalty
