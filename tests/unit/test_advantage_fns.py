"""Advantage functions checked against plain-Python float64 references."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.algorithms.advantages import ADVANTAGE_FN, broadcast_advantages
from rft.algorithms.tensor_checks import AlgorithmInputError

rewards_st = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=4),
        st.floats(min_value=-100, max_value=100, allow_nan=False, allow_infinity=False),
    ),
    min_size=1,
    max_size=24,
)


def _groups(rows: list[tuple[int, float]]) -> dict[int, list[float]]:
    groups: dict[int, list[float]] = {}
    for g, r in rows:
        groups.setdefault(g, []).append(r)
    return groups


def _tensors(rows: list[tuple[int, float]]) -> tuple[torch.Tensor, torch.Tensor]:
    group_index = torch.tensor([g * 7 - 3 for g, _ in rows], dtype=torch.long)  # non-contiguous ids
    return torch.tensor([r for _, r in rows], dtype=torch.float64), group_index


def ref_grpo(rows: list[tuple[int, float]], eps: float, std_normalize: bool) -> list[float]:
    groups = _groups(rows)
    out = []
    for g, r in rows:
        mean = math.fsum(groups[g]) / len(groups[g])
        std = statistics.pstdev(groups[g])
        out.append((r - mean) / (std + eps) if std_normalize else r - mean)
    return out


def ref_rloo(rows: list[tuple[int, float]]) -> list[float]:
    groups = _groups(rows)
    out = []
    for g, r in rows:
        n = len(groups[g])
        out.append(0.0 if n == 1 else r - (math.fsum(groups[g]) - r) / (n - 1))
    return out


def ref_reinforce_pp(rows: list[tuple[int, float]], eps: float) -> list[float]:
    xs = [r for _, r in rows]
    mean = math.fsum(xs) / len(xs)
    std = statistics.pstdev(xs)
    return [(x - mean) / (std + eps) for x in xs]


def ref_opmd(rows: list[tuple[int, float]], tau: float, baseline: str) -> list[float]:
    groups = _groups(rows)
    out = []
    for g, r in rows:
        vals = groups[g]
        if baseline == "mean":
            b = math.fsum(vals) / len(vals)
        else:
            b = tau * math.log(math.fsum(math.exp(v / tau) for v in vals) / len(vals))
        out.append(r - b)
    return out


def _close(got: torch.Tensor, want: list[float]) -> None:
    assert got.dtype == torch.float64
    for a, b in zip(got.tolist(), want, strict=True):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-9)


@settings(max_examples=80, deadline=None)
@given(rewards_st, st.booleans())
def test_grpo_matches_reference(rows: list[tuple[int, float]], std_normalize: bool) -> None:
    r, g = _tensors(rows)
    adv, metrics = ADVANTAGE_FN.get("grpo")(r, g, epsilon=1e-6, std_normalize=std_normalize)
    _close(adv, ref_grpo(rows, 1e-6, std_normalize))
    assert metrics["group_count"] == len(_groups(rows))


@settings(max_examples=80, deadline=None)
@given(rewards_st)
def test_rloo_matches_reference(rows: list[tuple[int, float]]) -> None:
    r, g = _tensors(rows)
    _close(ADVANTAGE_FN.get("rloo")(r, g)[0], ref_rloo(rows))


@settings(max_examples=80, deadline=None)
@given(rewards_st)
def test_reinforce_plus_plus_matches_reference(rows: list[tuple[int, float]]) -> None:
    r, g = _tensors(rows)
    _close(
        ADVANTAGE_FN.get("reinforce_plus_plus")(r, g, epsilon=1e-6)[0], ref_reinforce_pp(rows, 1e-6)
    )


@settings(max_examples=80, deadline=None)
@given(
    rewards_st,
    st.floats(min_value=0.05, max_value=10.0),
    st.sampled_from(["mean", "logavgexp"]),
)
def test_opmd_matches_reference(rows: list[tuple[int, float]], tau: float, baseline: str) -> None:
    rows = [(g, r / 20) for g, r in rows]  # keep exp(r / tau) representable in the reference
    r, g = _tensors(rows)
    adv, _ = ADVANTAGE_FN.get("opmd")(r, g, tau=tau, opmd_baseline=baseline)
    for a, b in zip(adv.tolist(), ref_opmd(rows, tau, baseline), strict=True):
        assert a == pytest.approx(b, rel=1e-7, abs=1e-7)


def test_opmd_logavgexp_does_not_overflow_with_large_rewards() -> None:
    r = torch.tensor([1000.0, 1001.0], dtype=torch.float64)
    adv, _ = ADVANTAGE_FN.get("opmd")(r, torch.zeros(2).long(), tau=0.01, opmd_baseline="logavgexp")
    assert torch.isfinite(adv).all()
    # baseline ~ max + tau*log(1/2); the best rollout is then ~ tau*log 2 above it.
    assert adv[1].item() == pytest.approx(0.01 * math.log(2), rel=1e-6)


@pytest.mark.parametrize("name", ["grpo", "rloo", "opmd", "reinforce_plus_plus"])
def test_group_of_one_and_equal_rewards_give_zero_not_nan(name: str) -> None:
    fn = ADVANTAGE_FN.get(name)
    single, _ = fn(torch.tensor([3.5]), torch.tensor([0]))
    assert single.tolist() == [0.0]
    equal, _ = fn(torch.full((4,), 0.7), torch.tensor([1, 1, 2, 2]))
    assert torch.equal(equal, torch.zeros(4))


def test_grpo_reports_zero_std_groups_and_keeps_float32() -> None:
    r = torch.tensor([1.0, 1.0, 0.0, 1.0], dtype=torch.float32)
    adv, metrics = ADVANTAGE_FN.get("grpo")(r, torch.tensor([0, 0, 1, 1]))
    assert adv.dtype == torch.float32
    assert metrics["zero_std_group_frac"] == 0.5
    assert adv[:2].tolist() == [0.0, 0.0]
    assert adv[2].item() == pytest.approx(-1.0, abs=1e-5)


def test_integer_rewards_become_float32() -> None:
    adv, _ = ADVANTAGE_FN.get("rloo")(torch.tensor([0, 1]), torch.tensor([0, 0]))
    assert adv.dtype == torch.float32 and adv.tolist() == [-1.0, 1.0]


def test_bad_inputs_are_named() -> None:
    fn = ADVANTAGE_FN.get("grpo")
    with pytest.raises(AlgorithmInputError, match="group_index: expected shape"):
        fn(torch.zeros(3), torch.zeros(2).long())
    with pytest.raises(AlgorithmInputError, match="group_index: expected an integer"):
        fn(torch.zeros(3), torch.zeros(3))
    with pytest.raises(AlgorithmInputError, match=r"rewards: non-finite value nan at index \(1,\)"):
        fn(torch.tensor([0.0, float("nan")]), torch.zeros(2).long())
    with pytest.raises(TypeError):
        fn(torch.zeros(2), torch.zeros(2).long(), tau=1.0)


def test_broadcast_zeroes_masked_tokens() -> None:
    out = broadcast_advantages(torch.tensor([2.0, -1.0]), torch.tensor([[1, 1, 0], [0, 0, 0]]))
    assert out.tolist() == [[2.0, 2.0, 0.0], [0.0, 0.0, 0.0]]
