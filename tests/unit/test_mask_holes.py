"""Masks with holes: environment/tool tokens between model turns are in the response but not trained.

Each loss term is checked against a float64 reference written here from its formula, computed
over only the mask-1 tokens (gathered row by row, so the reference never sees a hole). The
holes carry large finite garbage in logprob, old_logprob and advantages: if any of it reached a
result or a gradient, the comparison would fail. Gradients of hole positions must be exactly 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

import rft.algorithms.verl_library  # noqa: F401  (registers verl/* entries)
from rft.algorithms.aggregation import LOSS_AGG_MODES, aggregate_loss
from rft.algorithms.entropy import ENTROPY_LOSS_FN
from rft.algorithms.kl import KL_FN, apply_kl_penalty
from rft.algorithms.policy_losses import POLICY_LOSS_FN

B, T = 5, 11
# row 0: three model turns with environment tokens between them and trailing padding;
# row 1: no holes; row 2: starts with environment tokens; row 3: nothing trained; row 4: one token
MASK = torch.tensor(
    [
        [1, 1, 0, 0, 0, 1, 1, 1, 0, 1, 0],
        [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
        [0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0],
    ],
    dtype=torch.float64,
)


def _inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logprob = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2.0
    old = logprob + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv_row = torch.randn(B, generator=g, dtype=torch.float64)
    adv = adv_row[:, None].expand(B, T).clone()
    holes = MASK == 0
    # garbage where the environment's tokens are: it must reach neither result nor gradient
    logprob = torch.where(holes, torch.full_like(logprob, -40.0), logprob)
    old = torch.where(holes, torch.full_like(old, 35.0), old)
    adv = torch.where(holes, torch.full_like(adv, 1e4), adv)
    return logprob, old, adv


def _rows(*tensors: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
    """Per row, each tensor's mask-1 entries; rows without any are left out."""
    out = []
    for b in range(B):
        keep = MASK[b].nonzero().flatten()
        if keep.numel():
            out.append(tuple(t[b, keep] for t in tensors))
    return out


def reference_aggregate(per_row: list[torch.Tensor], mode: str) -> torch.Tensor:
    """The four loss_agg_mode formulas over rows of already-selected token losses."""
    if mode == "token-mean":
        return torch.cat(per_row).sum() / sum(r.numel() for r in per_row)
    if mode == "seq-mean-token-sum":
        return torch.stack([r.sum() for r in per_row]).mean()
    if mode == "seq-mean-token-mean":
        return torch.stack([r.mean() for r in per_row]).mean()
    if mode == "seq-mean-token-sum-norm":
        return torch.stack([r.sum() / T for r in per_row]).mean()
    raise AssertionError(mode)


def _clip(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    return torch.clamp(x, lo, hi)


def _ppo(lp: torch.Tensor, old: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    r = torch.exp(lp - old)
    return torch.maximum(-a * r, -a * _clip(r, 0.8, 1.2))


def _gspo(lp: torch.Tensor, old: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    # one ratio per sequence: geometric mean over the row's mask-1 tokens only
    s_value = torch.exp((lp - old).mean()).detach()
    s = torch.exp(lp - lp.detach()) * s_value
    return torch.maximum(-a * s, -a * _clip(s, 1 - 3e-4, 1 + 4e-4))


def _sg(x: torch.Tensor) -> torch.Tensor:
    return x.detach()


# per-token losses L_t(logprob, old, A) from each entry's docstring formula, at default args
TOKEN_REFERENCES: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "ppo": _ppo,
    "verl/ppo": _ppo,
    "mix": _ppo,  # on rollout rows alone (these tests have no demonstration rows) mix is PPO
    "mix_chord": _ppo,  # the same: CHORD's weighting acts on demonstration rows only
    "gspo": _gspo,
    "verl/gspo": _gspo,
    "sft": lambda lp, old, a: -lp,
    "opmd": lambda lp, old, a: -a * lp / 2.0,  # tau = 1: 1 / (1 + tau)
    "cispo": lambda lp, old, a: -_sg(_clip(torch.exp(lp - old), 0.0, 1.28)) * a * lp,
    "verl/cispo": lambda lp, old, a: -_sg(_clip(torch.exp(lp - old), 0.0, 1.28)) * a * lp,
    "topr": lambda lp, old, a: (
        -_sg(torch.where(a <= 0, _clip(torch.exp(lp - old), 0.0, 1.0), torch.ones_like(a))) * a * lp
    ),
    "sapo": lambda lp, old, a: (
        -a * torch.sigmoid(_tau(a) * (torch.exp(lp - old) - 1)) * 4 / _tau(a)
    ),
    "verl/sapo": lambda lp, old, a: (
        -a * torch.sigmoid(_tau(a) * (torch.exp(lp - old) - 1)) * 4 / _tau(a)
    ),
    "tis": lambda lp, old, a: -_sg(torch.clamp(torch.exp(lp - old), max=2.0)) * a * lp,
    "masked_is": lambda lp, old, a: (
        -_sg(((torch.exp(lp - old) >= 0.5) & (torch.exp(lp - old) <= 2.0)).to(lp.dtype))
        * _sg(torch.exp(lp - old))
        * a
        * lp
    ),
    # prox = logprob.detach(): r = exp(lp - sg(lp)) (value 1), w = min(exp(sg(lp) - old), 5)
    "decoupled_ppo": lambda lp, old, a: (
        _sg(torch.clamp(torch.exp(lp - old), max=5.0))
        * torch.maximum(-a * torch.exp(lp - _sg(lp)), -a * _clip(torch.exp(lp - _sg(lp)), 0.8, 1.2))
    ),
}


def _tau(a: torch.Tensor) -> torch.Tensor:
    return torch.where(a > 0, torch.ones_like(a), torch.full_like(a, 1.05))


def _modes_for(name: str) -> list[str]:
    # verl's sapo aggregates seq-mean-token-mean only (another mode is refused at load)
    return ["seq-mean-token-mean"] if name == "verl/sapo" else LOSS_AGG_MODES.names()


# losses whose terms are not per token: each has its own hole test below
SEQUENCE_LOSSES = {"dpo"}


def test_every_policy_loss_has_a_reference() -> None:
    assert set(POLICY_LOSS_FN.names()) == set(TOKEN_REFERENCES) | SEQUENCE_LOSSES


def test_dpo_sums_only_trained_tokens_of_each_pair() -> None:
    """DPO's per-row log-ratio to the reference sums the mask-1 tokens; garbage in the holes of
    logprob and ref_logprob reaches neither the loss nor a gradient. The pairs are MASK's rows
    (0, 1) and (2, 4): row 4 has one trained token (row 3, none, has no side to take)."""
    logprob, old, _ = _inputs(seed=11)  # both carry garbage in the holes
    rows = torch.tensor([0, 1, 2, 4])
    logprob, ref, mask = logprob[rows], old[rows], MASK[rows]
    holes = mask == 0
    side = torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64)  # chosen first, then second
    adv = side[:, None].expand(4, T).clone()
    adv = torch.where(holes, torch.full_like(adv, -1e4), adv)
    lp = logprob.clone().requires_grad_(True)
    loss, _ = POLICY_LOSS_FN.get("dpo")(lp, None, adv, mask, ref_logprob=ref, beta=0.3)
    (grad,) = torch.autograd.grad(loss, lp)

    lp_ref = logprob.clone().requires_grad_(True)
    rho = [
        (lp_ref[b, mask[b].nonzero().flatten()] - ref[b, mask[b].nonzero().flatten()]).sum()
        for b in range(4)
    ]
    h = torch.stack([rho[0] - rho[1], rho[3] - rho[2]])
    ref_loss = -torch.nn.functional.logsigmoid(0.3 * h).mean()
    (grad_ref,) = torch.autograd.grad(ref_loss, lp_ref)

    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, grad_ref, rtol=1e-12, atol=1e-12)
    assert torch.all(grad[holes] == 0)


@pytest.mark.parametrize(
    ("name", "mode"),
    [(n, m) for n in sorted(TOKEN_REFERENCES) for m in _modes_for(n)],
)
def test_policy_loss_trains_only_mask_one_tokens(name: str, mode: str) -> None:
    logprob, old, adv = _inputs(seed=len(name))
    lp = logprob.clone().requires_grad_(True)
    loss, _ = POLICY_LOSS_FN.get(name)(lp, old, adv, MASK, mode)
    (grad,) = torch.autograd.grad(loss, lp)

    lp_ref = logprob.clone().requires_grad_(True)
    fn = TOKEN_REFERENCES[name]
    ref = reference_aggregate([fn(lpr, o, a) for lpr, o, a in _rows(lp_ref, old, adv)], mode)
    (grad_ref,) = torch.autograd.grad(ref, lp_ref)

    assert loss.dtype == torch.float64
    assert math.isfinite(float(loss.detach()))
    # verl's own aggregation adds 1e-8 to each row's token count: a relative 1e-8 from exact
    rtol = 1e-7 if name.startswith("verl/") else 1e-10
    torch.testing.assert_close(loss, ref, rtol=rtol, atol=1e-12)
    torch.testing.assert_close(grad, grad_ref, rtol=rtol, atol=1e-12)
    assert torch.all(grad[MASK == 0] == 0)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES.names())
def test_aggregation_over_holes(mode: str) -> None:
    values, _, _ = _inputs(seed=3)
    got = aggregate_loss(values, MASK, mode)
    ref = reference_aggregate([v for (v,) in _rows(values)], mode)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES.names())
def test_entropy_bonus_over_holes(mode: str) -> None:
    g = torch.Generator().manual_seed(7)
    entropy = torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    entropy = torch.where(MASK == 0, torch.full_like(entropy, 1e6), entropy)
    term, metrics = ENTROPY_LOSS_FN.get("default")(entropy, MASK, mode, entropy_coef=0.01)
    ref = -0.01 * reference_aggregate([h for (h,) in _rows(entropy)], mode)
    torch.testing.assert_close(term, ref, rtol=1e-12, atol=1e-14)


KL_REFERENCES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "none": lambda lp, ref: torch.zeros_like(lp),
    "k1": lambda lp, ref: lp - ref,
    "abs": lambda lp, ref: (lp - ref).abs(),
    "k2": lambda lp, ref: 0.5 * (lp - ref) ** 2,
    "k3": lambda lp, ref: torch.exp(ref - lp) - (ref - lp) - 1,
    "low_var_kl": lambda lp, ref: torch.clamp(
        torch.exp(torch.clamp(ref - lp, -20, 20)) - torch.clamp(ref - lp, -20, 20) - 1, -10, 10
    ),
}


def test_every_kl_estimator_has_a_reference() -> None:
    assert set(KL_FN.names()) == set(KL_REFERENCES)


@pytest.mark.parametrize(
    ("kind", "mode"), [(k, m) for k in sorted(KL_REFERENCES) for m in LOSS_AGG_MODES.names()]
)
def test_kl_loss_over_holes(kind: str, mode: str) -> None:
    logprob, ref_logprob, _ = _inputs(seed=11)
    lp = logprob.clone().requires_grad_(True)
    loss, _ = KL_FN.get(kind)(lp, ref_logprob, MASK, mode)
    lp_ref = logprob.clone().requires_grad_(True)
    fn = KL_REFERENCES[kind]
    expected = reference_aggregate([fn(a, b) for a, b in _rows(lp_ref, ref_logprob)], mode)
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
    if kind != "none":
        (grad,) = torch.autograd.grad(loss, lp)
        (grad_ref,) = torch.autograd.grad(expected, lp_ref)
        torch.testing.assert_close(grad, grad_ref, rtol=1e-10, atol=1e-12)
        assert torch.all(grad[MASK == 0] == 0)


@pytest.mark.parametrize("kind", [k for k in sorted(KL_REFERENCES) if k != "none"])
def test_kl_reward_penalty_sums_only_mask_one_tokens(kind: str) -> None:
    logprob, ref_logprob, _ = _inputs(seed=5)
    rewards = torch.arange(B, dtype=torch.float64)
    got, _ = apply_kl_penalty(rewards, logprob, ref_logprob, MASK, kind, kl_coef=0.1)
    fn = KL_REFERENCES[kind]
    expected = rewards.clone()
    for b in range(B):
        keep = MASK[b].nonzero().flatten()
        expected[b] -= 0.1 * fn(logprob[b, keep], ref_logprob[b, keep]).sum()
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
