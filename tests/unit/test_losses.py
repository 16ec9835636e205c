"""Loss aggregation, policy/KL/entropy losses and their composition, against loop references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.algorithms.aggregation import aggregate_loss
from rft.algorithms.entropy import ENTROPY_LOSS_FN
from rft.algorithms.kl import KL_FN, apply_kl_penalty, kl_estimate
from rft.algorithms.logits import entropy_from_logits, token_logprobs
from rft.algorithms.objective import LossBatch, build_loss, compute_advantages
from rft.algorithms.policy_losses import POLICY_LOSS_FN
from rft.algorithms.presets import resolve_algorithm
from rft.algorithms.tensor_checks import AlgorithmInputError
from rft.errors import ConfigError

MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def ref_aggregate(loss: list[list[float]], mask: list[list[int]], mode: str) -> float:
    """Loop reference of aggregate_loss's documented formulas."""
    horizon = len(loss[0])
    if mode == "token-mean":
        n = sum(sum(row) for row in mask)
        total = math.fsum(
            v for lr, mr in zip(loss, mask, strict=True) for v, m in zip(lr, mr, strict=True) if m
        )
        return total / n if n else 0.0
    per_row = []
    for lr, mr in zip(loss, mask, strict=True):
        n = sum(mr)
        if not n:
            continue
        s = math.fsum(v for v, m in zip(lr, mr, strict=True) if m)
        per_row.append(
            {"seq-mean-token-sum": s, "seq-mean-token-mean": s / n}.get(mode, s / horizon)
        )
    return math.fsum(per_row) / len(per_row) if per_row else 0.0


@st.composite
def batches(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    b = draw(st.integers(1, 5))
    t = draw(st.integers(1, 7))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    logprob = -rng.exponential(1.0, (b, t))
    old = logprob + rng.normal(0, 0.4, (b, t))
    adv = rng.normal(0, 1.0, (b, t))
    mask = (rng.random((b, t)) < draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))).astype(np.int64)
    return logprob, old, adv, mask


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64)


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from(MODES))
def test_aggregate_matches_loops(batch: tuple[np.ndarray, ...], mode: str) -> None:
    loss, _, _, mask = batch
    got = aggregate_loss(_t(loss), torch.tensor(mask, dtype=torch.bool), mode)
    assert got.item() == pytest.approx(ref_aggregate(loss.tolist(), mask.tolist(), mode), abs=1e-12)


def test_fully_masked_rows_are_left_out_and_empty_mask_gives_zero_with_grad() -> None:
    loss = torch.tensor([[1.0, 3.0], [float("nan"), 100.0]], requires_grad=True)
    mask = torch.tensor([[1, 1], [0, 0]])
    for mode, want in zip(MODES, [2.0, 4.0, 2.0, 2.0], strict=True):
        assert aggregate_loss(loss, mask, mode).item() == pytest.approx(want)
    empty = aggregate_loss(loss, torch.zeros(2, 2), "token-mean")
    empty.backward()
    assert empty.item() == 0.0 and torch.equal(loss.grad, torch.zeros(2, 2))


def test_aggregate_rejects_unknown_mode_and_bad_mask() -> None:
    with pytest.raises(ConfigError, match="did you mean 'token-mean'"):
        aggregate_loss(torch.zeros(1, 1), torch.ones(1, 1), "token_mean")
    with pytest.raises(AlgorithmInputError, match="action_mask: expected shape"):
        aggregate_loss(torch.zeros(2, 2), torch.ones(2, 3))
    with pytest.raises(AlgorithmInputError, match="0 or 1"):
        aggregate_loss(torch.zeros(1, 2), torch.tensor([[1.0, 0.5]]))


def ref_ppo_tokens(lp, old, adv, low, high, c):
    out, clipped_flags = [], []
    for x, o, a in zip(lp, old, adv, strict=True):
        ratio = math.exp(max(-20.0, min(20.0, x - o)))
        l1 = -a * ratio
        l2 = -a * min(max(ratio, 1 - low), 1 + high)
        loss = max(l1, l2)
        if c is not None and a < 0:
            loss = min(loss, -a * c)
        out.append(loss)
        clipped_flags.append(1.0 if l2 > l1 else 0.0)
    return out, clipped_flags


@settings(max_examples=60, deadline=None)
@given(
    batches(),
    st.sampled_from(MODES),
    st.floats(0.05, 0.5),
    st.one_of(st.none(), st.floats(0.05, 0.5)),
    st.one_of(st.none(), st.floats(1.5, 5.0)),
)
def test_ppo_matches_loops(batch, mode, clip_range, clip_high, clip_c) -> None:
    lp, old, adv, mask = batch
    loss, metrics = POLICY_LOSS_FN.get("ppo")(
        _t(lp), _t(old), _t(adv), _t(mask), mode,
        clip_range=clip_range, clip_range_high=clip_high, clip_ratio_c=clip_c,
    )  # fmt: skip
    high = clip_range if clip_high is None else clip_high
    rows, flags = [], []
    for i in range(lp.shape[0]):
        r, f = ref_ppo_tokens(lp[i], old[i], adv[i], clip_range, high, clip_c)
        rows.append(r)
        flags.append(f)
    assert loss.item() == pytest.approx(ref_aggregate(rows, mask.tolist(), mode), abs=1e-10)
    assert metrics["pg_clipfrac"] == pytest.approx(
        ref_aggregate(flags, mask.tolist(), "token-mean"), abs=1e-12
    )
    kl = [
        [o - x for x, o in zip(a, b, strict=True)]
        for a, b in zip(lp.tolist(), old.tolist(), strict=True)
    ]
    assert metrics["ppo_kl"] == pytest.approx(
        ref_aggregate(kl, mask.tolist(), "token-mean"), abs=1e-12
    )


def test_ppo_gradient_is_zero_exactly_where_clipped() -> None:
    old = torch.zeros(1, 4, dtype=torch.float64)
    # ratios 1.5 (A>0: clipped), 0.5 (A<0: clipped), 1.1 (inside), 0.5 (A>0: not clipped)
    lp = torch.log(torch.tensor([[1.5, 0.5, 1.1, 0.5]], dtype=torch.float64)).requires_grad_()
    adv = torch.tensor([[1.0, -1.0, 1.0, 1.0]], dtype=torch.float64)
    loss, metrics = POLICY_LOSS_FN.get("ppo")(lp, old, adv, torch.ones(1, 4), clip_range=0.2)
    loss.backward()
    grad = lp.grad[0].tolist()
    assert grad[0] == 0.0 and grad[1] == 0.0
    # d/dlp of -A*exp(lp) / 4 tokens
    assert grad[2] == pytest.approx(-1.1 / 4) and grad[3] == pytest.approx(-0.5 / 4)
    assert metrics["pg_clipfrac"] == 0.5
    assert metrics["ratio_max"] == pytest.approx(1.5)


def test_dual_clip_bounds_negative_advantage_loss_and_stops_gradient() -> None:
    lp = torch.log(torch.tensor([[10.0]], dtype=torch.float64)).requires_grad_()
    loss, metrics = POLICY_LOSS_FN.get("ppo")(
        lp, torch.zeros(1, 1), torch.tensor([[-2.0]]), torch.ones(1, 1), clip_ratio_c=3.0
    )
    loss.backward()
    assert loss.item() == pytest.approx(6.0)  # -A * c, not -A * ratio = 20
    assert lp.grad.item() == 0.0
    assert metrics["pg_clipfrac_lower"] == 1.0
    with pytest.raises(AlgorithmInputError, match="clip_ratio_c"):
        POLICY_LOSS_FN.get("ppo")(lp, lp, lp, torch.ones(1, 1), clip_ratio_c=0.5)


def test_ppo_on_policy_gradient_is_minus_advantage() -> None:
    lp = torch.randn(3, 5, dtype=torch.float64).requires_grad_()
    adv = torch.randn(3, 5, dtype=torch.float64)
    loss, metrics = POLICY_LOSS_FN.get("ppo")(lp, lp.detach(), adv, torch.ones(3, 5))
    loss.backward()
    assert torch.allclose(lp.grad, -adv / 15)
    assert metrics["pg_clipfrac"] == 0.0 and metrics["ppo_kl"] == 0.0


def test_sft_and_opmd_losses() -> None:
    lp = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 0]])
    sft, _ = POLICY_LOSS_FN.get("sft")(lp, None, None, mask, "token-mean")
    assert sft.item() == pytest.approx(2.0)
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)
    opmd, _ = POLICY_LOSS_FN.get("opmd")(lp, lp, adv, mask, "token-mean", tau=3.0)
    assert opmd.item() == pytest.approx(((1 + 2 - 3) / 3) / 4)
    with pytest.raises(AlgorithmInputError, match="needs old_logprob"):
        POLICY_LOSS_FN.get("ppo")(lp, None, adv, mask)


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from(["k1", "k2", "k3", "low_var_kl", "abs", "none"]))
def test_kl_estimators_match_formulas(batch, kind: str) -> None:
    lp, ref, _, mask = batch
    got = kl_estimate(kind, _t(lp), _t(ref)).tolist()
    for i in range(lp.shape[0]):
        for j in range(lp.shape[1]):
            p, q = float(lp[i, j]), float(ref[i, j])
            d = q - p
            want = {
                "k1": p - q,
                "k2": 0.5 * (p - q) ** 2,
                "k3": math.exp(d) - d - 1,
                "low_var_kl": min(10.0, math.exp(max(-20, min(20, d))) - max(-20, min(20, d)) - 1),
                "abs": abs(p - q),
                "none": 0.0,
            }[kind]
            assert got[i][j] == pytest.approx(want, rel=1e-12, abs=1e-12)
    loss, metrics = KL_FN.get(kind)(_t(lp), _t(ref), _t(mask), "seq-mean-token-mean")
    assert loss.item() == pytest.approx(ref_aggregate(got, mask.tolist(), "seq-mean-token-mean"))
    assert metrics["kl_loss"] == pytest.approx(loss.item())


def test_low_var_kl_clamps_extremes_but_k3_does_not() -> None:
    lp, ref = torch.tensor([[-30.0]]), torch.tensor([[0.0]])
    assert kl_estimate("low_var_kl", lp, ref).item() == 10.0
    assert kl_estimate("k3", lp, ref).item() > 1e12
    assert kl_estimate("k3", ref, ref).item() == 0.0


def test_kl_penalty_subtracts_masked_sequence_kl() -> None:
    lp = torch.tensor([[-1.0, -1.0], [-2.0, -5.0]])
    ref = torch.tensor([[-1.5, -1.0], [-1.0, 0.0]])
    rewards, _ = apply_kl_penalty(
        torch.tensor([1.0, 1.0]), lp, ref, torch.tensor([[1, 1], [1, 0]]), "k1", kl_coef=0.1
    )
    assert rewards.tolist() == pytest.approx([1.0 - 0.1 * 0.5, 1.0 - 0.1 * -1.0])
    with pytest.raises(ConfigError, match="algorithm.kl_penalty_fn"):
        apply_kl_penalty(torch.zeros(2), lp, ref, torch.ones(2, 2), "kk1", 0.1)


def test_entropy_term_sign_and_none() -> None:
    h = torch.tensor([[1.0, 3.0]])
    term, metrics = ENTROPY_LOSS_FN.get("default")(h, torch.ones(1, 2), "token-mean", 0.1)
    assert term.item() == pytest.approx(-0.2) and metrics["entropy"] == pytest.approx(2.0)
    zero, _ = ENTROPY_LOSS_FN.get("none")(None, torch.ones(1, 2), "token-mean", 0.1)
    assert zero.item() == 0.0


def test_logits_helpers_match_reference() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 5, generator=gen, dtype=torch.float64)
    ids = torch.randint(0, 5, (2, 3), generator=gen)
    lp = token_logprobs(logits, ids)
    ent = entropy_from_logits(logits)
    for b in range(2):
        for t in range(3):
            z = logits[b, t].tolist()
            norm = math.log(math.fsum(math.exp(v) for v in z))
            probs = [math.exp(v - norm) for v in z]
            assert lp[b, t].item() == pytest.approx(z[ids[b, t]] - norm, abs=1e-12)
            assert ent[b, t].item() == pytest.approx(-math.fsum(p * math.log(p) for p in probs))


def test_composed_loss_is_sum_of_parts() -> None:
    cfg = {
        "algorithm_type": "grpo",
        "repeat_times": 2,
        "kl_loss_fn": "low_var_kl",
        "kl_loss_fn_args": {"kl_coef": 0.05},
        "entropy_loss_fn_args": {"entropy_coef": 0.01},
        "policy_loss_fn_args": {"clip_range_high": 0.28, "loss_agg_mode": "seq-mean-token-mean"},
    }
    spec = resolve_algorithm(cfg)
    loss_fn = build_loss(spec)
    assert loss_fn.needs_reference and loss_fn.needs_entropy
    gen = torch.Generator().manual_seed(1)
    lp = -torch.rand(4, 6, generator=gen, dtype=torch.float64)
    mask = (torch.rand(4, 6, generator=gen) < 0.8).long()
    adv, _ = compute_advantages(
        spec, torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]), mask
    )
    batch = LossBatch(mask, old_logprob=lp - 0.1, advantages=adv, ref_logprob=lp + 0.2)
    ent = torch.rand(4, 6, generator=gen, dtype=torch.float64)
    total, metrics = loss_fn(lp, ent, batch)
    mode = "seq-mean-token-mean"
    pg, _ = POLICY_LOSS_FN.get("ppo")(lp, lp - 0.1, adv, mask, mode, clip_range_high=0.28)
    kl, _ = KL_FN.get("low_var_kl")(lp, lp + 0.2, mask, mode)
    want = pg + 0.05 * kl - 0.01 * aggregate_loss(ent, mask, mode)
    assert total.item() == pytest.approx(want.item(), abs=1e-12)
    assert metrics["loss"] == pytest.approx(want.item())
    with pytest.raises(AlgorithmInputError, match="ref_logprob"):
        loss_fn(lp, ent, LossBatch(mask, old_logprob=lp, advantages=adv))


def test_raft_preset_needs_no_advantages_reference_or_entropy() -> None:
    """raft: the supervised loss on rollouts (what `sft` meant before it named dataset SFT)."""
    loss_fn = build_loss("raft")
    assert not loss_fn.needs_reference and not loss_fn.needs_entropy
    lp = torch.tensor([[-1.0, -3.0]])
    loss, _ = loss_fn(lp, None, LossBatch(torch.ones(1, 2)))
    assert loss.item() == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"algorithm_type": "grpoo"}, "did you mean 'grpo'"),
        ({"advantage_fn": "rlooo"}, "unknown algorithm.advantage_fn 'rlooo'"),
        ({"policy_loss_fn_args": {"clip_rnage": 0.1}}, "policy_loss_fn_args.clip_rnage"),
        ({"kl_loss_fn": "k4"}, "unknown algorithm.kl_loss_fn 'k4'"),
        ({"kl_penalty_fn": "k9"}, "unknown algorithm.kl_penalty_fn 'k9'"),
        ({"loss_agg_mode": "token-sum"}, "unknown algorithm.loss_agg_mode"),
        ({"entropy_loss_fn_args": {"entropy_coef": "high"}}, "entropy_coef: expected a number"),
        ({"algorithm_type": "grpo", "repeat_times": 1}, "at least 2 rollouts"),
    ],
)
def test_resolve_errors_name_the_key(cfg: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_algorithm(cfg)


def test_resolve_reads_the_config_dataclass() -> None:
    from rft.config.schema import AlgorithmConfig

    spec = resolve_algorithm(
        AlgorithmConfig(algorithm_type="rloo", repeat_times=4, kl_loss_fn="none")
    )
    assert spec.advantage_fn == "rloo" and spec.policy_loss_fn == "ppo"
    assert not spec.use_reference
