"""The hf engine's own generate hooks: the per-row repetition penalty against a float64 reference,
and the deadline stop."""

from __future__ import annotations

import time

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.engines.generation_controls import DeadlineStop, RowRepetitionPenalty


def reference_penalty(
    ids: list[list[int]], starts: list[int], scores: torch.Tensor, penalty: float
) -> torch.Tensor:
    """Row by row: every token id at a position >= the row's start is penalised once."""
    out = scores.clone().double()
    for b, row in enumerate(ids):
        for v in set(row[starts[b] :]):
            x = out[b, v]
            out[b, v] = x / penalty if x > 0 else x * penalty
    return out


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[list[int]], list[int], torch.Tensor, float]:
    vocab = draw(st.integers(2, 12))
    rows = draw(st.integers(1, 4))
    width = draw(st.integers(1, 8))
    ids = [
        draw(st.lists(st.integers(0, vocab - 1), min_size=width, max_size=width))
        for _ in range(rows)
    ]
    starts = [draw(st.integers(0, width)) for _ in range(rows)]
    values = draw(
        st.lists(
            st.floats(-8, 8, allow_nan=False, width=32),
            min_size=rows * vocab,
            max_size=rows * vocab,
        )
    )
    penalty = draw(st.floats(0.25, 4.0))
    return ids, starts, torch.tensor(values, dtype=torch.float64).view(rows, vocab), penalty


@settings(max_examples=200, deadline=None)
@given(batches())
def test_row_repetition_penalty_matches_reference(batch) -> None:
    ids, starts, scores, penalty = batch
    got = RowRepetitionPenalty(penalty, torch.tensor(starts))(torch.tensor(ids), scores.clone())
    torch.testing.assert_close(got, reference_penalty(ids, starts, scores, penalty))


def test_left_padding_is_not_penalised() -> None:
    pad = 0
    scores = torch.tensor([[2.0, 1.0, -1.0], [2.0, 1.0, -1.0]], dtype=torch.float64)
    ids = torch.tensor([[pad, pad, 2], [1, 1, 2]])
    got = RowRepetitionPenalty(2.0, torch.tensor([2, 0]))(ids, scores)
    assert got[0].tolist() == [2.0, 1.0, -2.0]  # the pads before row 0's start are not "seen"
    assert got[1].tolist() == [2.0, 0.5, -2.0]


def test_deadline_stop_fires_for_every_row_once_the_time_is_up() -> None:
    ids = torch.zeros((3, 4), dtype=torch.long)
    later = DeadlineStop(time.monotonic() + 3600)
    assert not later(ids, None).any() and not later.fired
    passed = DeadlineStop(time.monotonic() - 1)
    assert passed(ids, None).all() and passed.fired
