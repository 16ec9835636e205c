"""token_logprobs: the pure formula, chunking, padding invariance and gradients on a tiny model."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.engines.logprobs import logprobs_and_entropy_from_logits, token_logprobs
from rft.engines.models import ModelSpec, load_model


@pytest.fixture(scope="module")
def model64():
    model, _ = load_model(ModelSpec("tiny", dtype="float64", seed=1))
    return model


def _naive(model, ids, temperature):
    logits = model(input_ids=ids).logits.double()[:, :-1] / temperature
    logp = torch.log_softmax(logits, -1)
    picked = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
    return picked, -(logp.exp() * logp).sum(-1)


def test_formula_against_hand_computed_values() -> None:
    logits = torch.tensor([[0.0, math.log(3.0)]], dtype=torch.float64)
    lp, ent = logprobs_and_entropy_from_logits(logits, torch.tensor([1]), 1.0)
    assert lp.item() == pytest.approx(math.log(0.75))
    assert ent.item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))
    lp2, _ = logprobs_and_entropy_from_logits(logits, torch.tensor([1]), 0.5)
    assert lp2.item() == pytest.approx(math.log(9 / 10))


@settings(max_examples=50, deadline=None)
@given(
    rows=st.integers(1, 4),
    vocab=st.integers(2, 40),
    temperature=st.floats(0.1, 3.0),
    seed=st.integers(0, 10_000),
)
def test_formula_properties(rows: int, vocab: int, temperature: float, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=gen, dtype=torch.float64) * 5
    all_lp = torch.stack(
        [
            logprobs_and_entropy_from_logits(logits, torch.full((rows,), v), temperature)[0]
            for v in range(vocab)
        ],
        dim=-1,
    )
    assert torch.allclose(all_lp.exp().sum(-1), torch.ones(rows, dtype=torch.float64))
    assert (all_lp <= 0).all()
    _, ent = logprobs_and_entropy_from_logits(logits, torch.zeros(rows, dtype=torch.long), 1.0)
    assert (ent >= -1e-12).all() and (ent <= math.log(vocab) + 1e-9).all()
    # float32 input gives float32 output close to the float64 reference
    lp32, _ = logprobs_and_entropy_from_logits(
        logits.float(), torch.zeros(rows).long(), temperature
    )
    assert lp32.dtype == torch.float32
    assert torch.allclose(lp32.double(), all_lp[:, 0], atol=1e-4)


def test_matches_naive_full_forward_and_chunks_do_not_matter(model64) -> None:
    ids = torch.randint(3, 250, (3, 17), generator=torch.Generator().manual_seed(0))
    ref_lp, ref_ent = _naive(model64, ids, 0.7)
    for chunk in (1, 5, 4096):
        lp, ent = token_logprobs(model64, ids, temperature=0.7, chunk_tokens=chunk)
        assert lp.shape == (3, 16) and lp.dtype == torch.float64
        assert torch.allclose(lp, ref_lp, atol=1e-10)
        assert torch.allclose(ent, ref_ent, atol=1e-10)


def test_start_skips_prompt_positions(model64) -> None:
    ids = torch.randint(3, 250, (2, 12), generator=torch.Generator().manual_seed(1))
    full, _ = token_logprobs(model64, ids)
    tail, _ = token_logprobs(model64, ids, start=5)
    assert tail.shape == (2, 6)
    assert torch.allclose(tail, full[:, 5:], atol=1e-12)
    with pytest.raises(ValueError, match="start"):
        token_logprobs(model64, ids, start=11)
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(model64, ids, temperature=0.0)


def test_left_padding_does_not_change_logprobs(model64) -> None:
    seq = torch.randint(3, 250, (1, 9), generator=torch.Generator().manual_seed(2))
    alone, _ = token_logprobs(model64, seq)
    padded = torch.cat([torch.zeros(1, 4, dtype=torch.long), seq], dim=1)
    mask = torch.cat([torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 9, dtype=torch.long)], 1)
    with_pad, _ = token_logprobs(model64, padded, mask)
    assert torch.allclose(with_pad[:, 4:], alone, atol=1e-9)


def test_gradients_equal_with_and_without_chunking(model64) -> None:
    ids = torch.randint(3, 250, (2, 10), generator=torch.Generator().manual_seed(3))
    grads = []
    for chunk in (3, 4096):
        model64.zero_grad()
        lp, ent = token_logprobs(model64, ids, chunk_tokens=chunk)
        (lp.sum() + 0.1 * ent.sum()).backward()
        grads.append(model64.model.embed_tokens.weight.grad.clone())
    model64.zero_grad()
    assert grads[0].abs().sum() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-10)


@settings(max_examples=50, deadline=None)
@given(
    temperatures=st.lists(st.floats(0.05, 5.0), min_size=1, max_size=5),
    positions=st.integers(1, 4),
    vocab=st.integers(2, 30),
    seed=st.integers(0, 10_000),
)
def test_per_row_temperature_is_each_rows_own_formula(
    temperatures: list[float], positions: int, vocab: int, seed: int
) -> None:
    gen = torch.Generator().manual_seed(seed)
    rows = len(temperatures)
    logits = torch.randn(rows, positions, vocab, generator=gen, dtype=torch.float64) * 4
    targets = torch.randint(0, vocab, (rows, positions), generator=gen)
    lp, ent = logprobs_and_entropy_from_logits(
        logits, targets, torch.tensor(temperatures, dtype=torch.float64)
    )
    assert lp.dtype == torch.float64 and lp.shape == (rows, positions)
    for b, t in enumerate(temperatures):
        for j in range(positions):
            # the formula by hand: x/T - log Σ exp(x/T), entropy -Σ p log p
            x = [float(v) / t for v in logits[b, j]]
            top = max(x)
            norm = top + math.log(sum(math.exp(v - top) for v in x))
            logp = [v - norm for v in x]
            assert lp[b, j].item() == pytest.approx(logp[targets[b, j]], abs=1e-12)
            want_ent = -sum(math.exp(v) * v for v in logp)
            assert ent[b, j].item() == pytest.approx(want_ent, abs=1e-12)
        # and a row alone at its scalar temperature gives the same numbers
        alone_lp, alone_ent = logprobs_and_entropy_from_logits(
            logits[b : b + 1], targets[b : b + 1], t
        )
        assert torch.equal(alone_lp[0], lp[b]) and torch.equal(alone_ent[0], ent[b])


def test_temperature_tensor_must_be_one_per_row() -> None:
    logits = torch.zeros(3, 2, 5, dtype=torch.float64)
    targets = torch.zeros(3, 2, dtype=torch.long)
    for bad in (torch.ones(2), torch.ones(3, 1), torch.tensor(1.0)):
        with pytest.raises(ValueError, match=r"one per row"):
            logprobs_and_entropy_from_logits(logits, targets, bad)


def test_token_logprobs_with_per_row_temperatures(model64) -> None:
    ids = torch.randint(3, 250, (3, 11), generator=torch.Generator().manual_seed(4))
    temps = [0.7, 1.3, 0.7]
    for chunk in (2, 4096):
        lp, ent = token_logprobs(model64, ids, temperature=torch.tensor(temps), chunk_tokens=chunk)
        for b, t in enumerate(temps):
            ref_lp, ref_ent = _naive(model64, ids[b : b + 1], t)
            assert torch.allclose(lp[b], ref_lp[0], atol=1e-10)
            assert torch.allclose(ent[b], ref_ent[0], atol=1e-10)
    for bad in (float("nan"), float("inf"), -0.5):
        with pytest.raises(ValueError, match="temperature"):
            token_logprobs(model64, ids, temperature=bad)
        with pytest.raises(ValueError, match="temperature"):
            token_logprobs(model64, ids, temperature=torch.tensor([0.7, bad, 1.0]))
