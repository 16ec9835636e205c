"""Off-policy-corrected losses (decoupled PPO, TIS, masked IS) and the named algorithms' surrogates
(GSPO, CISPO, TOPR, SAPO), against float64 references written from the formulas with loops.

Each reference computes, per token, the loss term and its derivative with respect to the
current logprob by hand; the tests compare both the loss value and the autograd gradient.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.algorithms.objective import LossBatch, build_loss
from rft.algorithms.policy_losses import POLICY_LOSS_FN
from rft.algorithms.tensor_checks import AlgorithmInputError


@st.composite
def batches(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    """logprob, behaviour logprob, proximal logprob, advantages, mask (float64)."""
    b = draw(st.integers(1, 4))
    t = draw(st.integers(1, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    logprob = -rng.exponential(1.0, (b, t))
    behav = logprob + rng.normal(0, 0.6, (b, t))
    prox = logprob + rng.normal(0, 0.15, (b, t))
    adv = np.repeat(rng.normal(0, 1.0, (b, 1)), t, axis=1)
    mask = (rng.random((b, t)) < draw(st.sampled_from([0.5, 0.9, 1.0]))).astype(np.int64)
    mask[0, 0] = 1  # at least one trained token
    return logprob, behav, prox, adv, mask


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64)


def run(name: str, batch: tuple[np.ndarray, ...], mode: str = "token-mean", **args):
    """(loss, d loss / d logprob, metrics) of the registered loss."""
    logprob, behav, _, adv, mask = batch
    lp = _t(logprob).requires_grad_(True)
    loss, metrics = POLICY_LOSS_FN.get(name)(lp, _t(behav), _t(adv), _t(mask), mode, **args)
    loss.backward()
    return loss.item(), lp.grad.numpy(), metrics


def token_mean_ref(terms: list[list[float]], grads: list[list[float]], mask: np.ndarray):
    """Token-mean of per-token terms, and each token's share of the gradient."""
    n = int(mask.sum())
    value = math.fsum(terms[b][t] for b, t in zip(*np.nonzero(mask), strict=True)) / n
    grad = np.zeros(mask.shape)
    for b, t in zip(*np.nonzero(mask), strict=True):
        grad[b, t] = grads[b][t] / n
    return value, grad


def per_token(batch, fn):
    """Apply fn(b, t) -> (term, dterm) to every position."""
    logprob = batch[0]
    terms = [[0.0] * logprob.shape[1] for _ in range(logprob.shape[0])]
    grads = [[0.0] * logprob.shape[1] for _ in range(logprob.shape[0])]
    for b in range(logprob.shape[0]):
        for t in range(logprob.shape[1]):
            terms[b][t], grads[b][t] = fn(b, t)
    return terms, grads


def clipped_ref(r: float, a: float, low: float, high: float) -> tuple[float, float]:
    """PPO-clip term max(-a r, -a clip(r)) and its derivative in r."""
    unclipped, clipped = -a * r, -a * min(max(r, 1 - low), 1 + high)
    if clipped > unclipped:
        return clipped, 0.0
    return unclipped, -a


# -- decoupled PPO -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from([None, 1.5, 5.0]))
def test_decoupled_ppo_matches_reference(batch, cap) -> None:
    logprob, behav, prox, adv, mask = batch
    lp = _t(logprob).requires_grad_(True)
    loss, metrics = POLICY_LOSS_FN.get("decoupled_ppo")(
        lp,
        _t(behav),
        _t(adv),
        _t(mask),
        "token-mean",
        prox_logprob=_t(prox),
        clip_range=0.2,
        behav_imp_weight_cap=cap,
    )
    loss.backward()

    def term(b, t):
        w = math.exp(prox[b, t] - behav[b, t])
        w = w if cap is None else min(w, cap)
        r = math.exp(logprob[b, t] - prox[b, t])
        value, d_dr = clipped_ref(r, adv[b, t], 0.2, 0.2)
        return w * value, w * d_dr * r  # d/dlogprob = d/dr * r

    want, want_grad = token_mean_ref(*per_token(batch, term), mask)
    assert loss.item() == pytest.approx(want, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(lp.grad.numpy(), want_grad, rtol=1e-9, atol=1e-12)
    if cap is not None:
        raw = np.exp(prox - behav)[mask > 0]
        assert metrics["behav_truncated_frac"] == pytest.approx(float((raw > cap).mean()))
        assert metrics["behav_weight_max"] <= cap + 1e-12


@settings(max_examples=40, deadline=None)
@given(batches())
def test_decoupled_ppo_without_prox_is_the_truncated_weighted_policy_gradient(batch) -> None:
    """prox = logprob.detach() (one optimizer step per batch): r = 1, the clip never binds and
    the gradient is -min(pi/pi_behav, C) A / n per token."""
    logprob, behav, _, adv, mask = batch
    _, grad, metrics = run("decoupled_ppo", batch, behav_imp_weight_cap=2.0)
    want = np.where(mask > 0, -np.minimum(np.exp(logprob - behav), 2.0) * adv / mask.sum(), 0.0)
    np.testing.assert_allclose(grad, want, rtol=1e-9, atol=1e-12)
    assert metrics["pg_clipfrac"] == 0.0


def test_decoupled_ppo_through_algorithm_loss_uses_the_batch_prox_or_the_recomputed_one() -> None:
    """AlgorithmLoss fills prox_logprob from the LossBatch (never from config): given, it moves
    the ratio off 1 and the clip can bind; absent, the recomputed logprobs stand in."""
    loss_fn = build_loss(
        "grpo",
        {
            "policy_loss_fn": "decoupled_ppo",
            "kl_loss_fn": "none",
            "policy_loss_fn_args": {"behav_imp_weight_cap": None},
        },
    )
    lp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64, requires_grad=True)
    behav = torch.tensor([[-1.5, -2.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    mask = torch.ones(1, 2)
    base = LossBatch(action_mask=mask, old_logprob=behav, advantages=adv)
    _, recomputed = loss_fn(lp, None, base)
    assert recomputed["ratio_mean"] == pytest.approx(1.0)
    assert recomputed["behav_weight_max"] == pytest.approx(math.exp(0.5))
    prox = torch.tensor([[-1.5, -2.0]], dtype=torch.float64)  # one step behind: r = e^0.5 > 1.2
    _, given_prox = loss_fn(lp, None, LossBatch(mask, behav, adv, prox_logprob=prox))
    assert given_prox["pg_clipfrac"] == pytest.approx(0.5)
    assert given_prox["behav_weight_max"] == pytest.approx(1.0)


def test_prox_logprob_is_not_a_config_arg() -> None:
    from rft.errors import ConfigError

    with pytest.raises(ConfigError, match="prox_logprob"):
        build_loss(
            "grpo",
            {"policy_loss_fn": "decoupled_ppo", "policy_loss_fn_args": {"prox_logprob": 1.0}},
        )


# -- TIS and masked IS -----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from([1.0, 2.0, 10.0]))
def test_tis_matches_reference(batch, cap) -> None:
    logprob, behav, _, adv, mask = batch

    def term(b, t):
        w = min(math.exp(logprob[b, t] - behav[b, t]), cap)
        return -w * adv[b, t] * logprob[b, t], -w * adv[b, t]

    want, want_grad = token_mean_ref(*per_token(batch, term), mask)
    value, grad, metrics = run("tis", batch, tis_imp_ratio_cap=cap)
    assert value == pytest.approx(want, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-9, atol=1e-12)
    assert metrics["tis_weight_max"] <= cap + 1e-12


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from([(0.5, 2.0), (0.9, 1.1), (0.0, 1.0)]))
def test_masked_is_matches_reference_and_masked_tokens_get_no_gradient(batch, bounds) -> None:
    logprob, behav, _, adv, mask = batch
    low, high = bounds

    def term(b, t):
        rho = math.exp(logprob[b, t] - behav[b, t])
        keep = 1.0 if low <= rho <= high else 0.0
        return -keep * rho * adv[b, t] * logprob[b, t], -keep * rho * adv[b, t]

    want, want_grad = token_mean_ref(*per_token(batch, term), mask)
    value, grad, metrics = run("masked_is", batch, mask_ratio_low=low, mask_ratio_high=high)
    assert value == pytest.approx(want, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-9, atol=1e-12)
    rho = np.exp(logprob - behav)
    outside = ((rho < low) | (rho > high)) & (mask > 0)
    assert np.all(grad[outside] == 0.0)
    assert metrics["masked_frac"] == pytest.approx(outside.sum() / mask.sum())


def test_off_policy_losses_refuse_bad_bounds() -> None:
    batch = (np.full((1, 2), -1.0), np.full((1, 2), -1.0), None, np.ones((1, 2)), np.ones((1, 2)))
    with pytest.raises(AlgorithmInputError, match="tis_imp_ratio_cap"):
        run("tis", batch, tis_imp_ratio_cap=0.0)
    with pytest.raises(AlgorithmInputError, match="mask_ratio_low"):
        run("masked_is", batch, mask_ratio_low=1.5, mask_ratio_high=2.0)
    with pytest.raises(AlgorithmInputError, match="behav_imp_weight_cap"):
        run("decoupled_ppo", batch, behav_imp_weight_cap=-1.0)


# -- GSPO, CISPO, TOPR, SAPO -----------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(batches())
def test_gspo_matches_reference(batch) -> None:
    """One ratio per sequence, exp(mean over its tokens of logprob - old); seq-mean-token-mean."""
    logprob, behav, _, adv, mask = batch
    low, high = 0.05, 0.08
    rows = [b for b in range(mask.shape[0]) if mask[b].sum()]
    value, grad = 0.0, np.zeros(mask.shape)
    for b in rows:
        toks = [t for t in range(mask.shape[1]) if mask[b, t]]
        s = math.exp(math.fsum(logprob[b, t] - behav[b, t] for t in toks) / len(toks))
        for t in toks:
            term, d_ds = clipped_ref(s, adv[b, t], low, high)
            value += term / len(toks) / len(rows)
            grad[b, t] = d_ds * s / len(toks) / len(rows)
    got, got_grad, _ = run(
        "gspo", batch, "seq-mean-token-mean", clip_range_low=low, clip_range_high=high
    )
    assert got == pytest.approx(value, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(got_grad, grad, rtol=1e-9, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(batches(), st.booleans())
def test_cispo_matches_reference(batch, mask_clip) -> None:
    logprob, behav, _, adv, mask = batch

    def term(b, t):
        r = math.exp(logprob[b, t] - behav[b, t])
        w = min(max(r, 1 - 1.0), 1 + 0.28)
        a = adv[b, t]
        keep = 1.0
        if mask_clip and ((a > 0 and r > 1 + 0.1) or (a < 0 and r < 1 - 0.1)):
            keep = 0.0
        return -w * keep * a * logprob[b, t], -w * keep * a

    want, want_grad = token_mean_ref(*per_token(batch, term), mask)
    value, grad, _ = run(
        "cispo",
        batch,
        enable_mask_clip=mask_clip,
        mask_clip_range_low=0.1,
        mask_clip_range_high=0.1,
    )
    assert value == pytest.approx(want, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-9, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from([0.0, 0.5]))
def test_topr_matches_reference(batch, threshold) -> None:
    logprob, behav, _, adv, mask = batch

    def term(b, t):
        r = math.exp(logprob[b, t] - behav[b, t])
        alpha = min(max(r, 0.0), 1.0) if adv[b, t] <= threshold else 1.0
        return -alpha * adv[b, t] * logprob[b, t], -alpha * adv[b, t]

    want, want_grad = token_mean_ref(*per_token(batch, term), mask)
    value, grad, _ = run("topr", batch, advantage_threshold=threshold)
    assert value == pytest.approx(want, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-9, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(batches())
def test_sapo_matches_reference(batch) -> None:
    logprob, behav, _, adv, mask = batch
    tau_pos, tau_neg = 1.0, 1.05

    def term(b, t):
        r = math.exp(logprob[b, t] - behav[b, t])
        tau = tau_pos if adv[b, t] > 0 else tau_neg
        sig = 1.0 / (1.0 + math.exp(-tau * (r - 1.0)))
        gate = sig * 4.0 / tau
        d_dr = 4.0 * sig * (1.0 - sig)
        return -gate * adv[b, t], -adv[b, t] * d_dr * r

    want, want_grad = token_mean_ref(*per_token(batch, term), mask)
    value, grad, _ = run("sapo", batch, tau_pos=tau_pos, tau_neg=tau_neg)
    assert value == pytest.approx(want, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-9, atol=1e-12)


def test_sapo_on_policy_gradient_is_the_policy_gradient() -> None:
    """At r = 1 the gate's slope is 1: SAPO's gradient is -A grad log pi, whatever tau."""
    lp = torch.tensor([[-0.7, -1.3]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[2.0, -1.0]], dtype=torch.float64)
    loss, _ = POLICY_LOSS_FN.get("sapo")(
        lp, lp.detach().clone(), adv, torch.ones(1, 2), "token-mean", tau_pos=3.0, tau_neg=7.0
    )
    loss.backward()
    np.testing.assert_allclose(lp.grad.numpy(), [[-1.0, 0.5]], rtol=1e-12)
