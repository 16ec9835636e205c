"""Teacher advantages (`on_policy_distill`, `jsd`) and CHORD (`mix_chord`): float64 references
written token by token with the math module, a differential test of on_policy_distill against
verl's on-policy distillation advantage (-k1 of student and teacher), CHORD's μ schedule against
its piecewise definition, and CHORD's loss through the objective (micro-batches adding up to the
whole batch, μ following the LossBatch's step)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.algorithms.advantages import ADVANTAGE_FN
from rft.algorithms.chord import chord_mu
from rft.algorithms.expert_rows import BatchUnits
from rft.algorithms.objective import LossBatch, build_loss
from rft.algorithms.presets import resolve_algorithm
from rft.algorithms.tensor_checks import AlgorithmInputError
from rft.errors import ConfigError
from tests.unit.test_expert_rows_loss import ppo_token_losses


def token_batch(seed: int, rows: int = 4, width: int = 6):
    rng = np.random.default_rng(seed)
    student = -rng.random((rows, width)) * 4
    teacher = -rng.random((rows, width)) * 4
    mask = (rng.random((rows, width)) > 0.25).astype(np.float64)
    mask[0, :] = 1.0
    return student, teacher, mask


def t64(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kl_coef", [1.0, 0.3])
def test_on_policy_distill_matches_its_token_reference(seed: int, kl_coef: float) -> None:
    s, t, m = token_batch(seed)
    got, metrics = ADVANTAGE_FN.get("on_policy_distill")(t64(s), t64(t), t64(m), kl_coef=kl_coef)
    want = [[kl_coef * (t[b, i] - s[b, i]) * m[b, i] for i in range(s.shape[1])] for b in range(4)]
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-12)
    kl_rows = [
        math.fsum((s[b, i] - t[b, i]) * m[b, i] for i in range(s.shape[1])) for b in range(4)
    ]
    assert metrics["kl_mean"] == pytest.approx(math.fsum(kl_rows) / 4, abs=1e-12)


def jsd_reference(s: float, t: float, beta: float, temperature: float) -> float:
    s, t = s / temperature, t / temperature
    if beta == 0.0:
        return s - t
    if beta == 1.0:
        return t - s
    log_m = math.log(beta * math.exp(t) + (1 - beta) * math.exp(s))
    return beta * (t - log_m) + (1 - beta) * (s - log_m)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_jsd_matches_its_token_reference(seed: int, beta: float, temperature: float) -> None:
    s, t, m = token_batch(seed)
    got, metrics = ADVANTAGE_FN.get("jsd")(
        t64(s), t64(t), t64(m), lambda_coef=beta, kl_coef=2.0, temperature=temperature
    )
    jsd = [
        [jsd_reference(s[b, i], t[b, i], beta, temperature) * m[b, i] for i in range(s.shape[1])]
        for b in range(4)
    ]
    np.testing.assert_allclose(got.numpy(), -2.0 * np.array(jsd), rtol=0, atol=1e-12)
    assert metrics["jsd_mean"] == pytest.approx(np.sum(jsd, axis=1).mean(), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-30.0, -1e-3), min_size=1, max_size=8),
    st.sampled_from(["on_policy_distill", "jsd"]),
)
def test_a_teacher_that_agrees_gives_no_advantage(logprobs: list[float], name: str) -> None:
    lp = torch.tensor([logprobs], dtype=torch.float64)
    adv, _ = ADVANTAGE_FN.get(name)(lp, lp.clone(), torch.ones_like(lp))
    assert float(adv.abs().max()) < 1e-12


def test_padding_of_any_value_off_the_mask_is_ignored() -> None:
    s = torch.tensor([[-1.0, float("nan")]], dtype=torch.float64)
    t = torch.tensor([[-2.0, float("-inf")]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    for name in ("on_policy_distill", "jsd"):
        adv, _ = ADVANTAGE_FN.get(name)(s, t, mask)
        assert torch.isfinite(adv).all() and adv[0, 1] == 0
    with pytest.raises(AlgorithmInputError, match="old_logprob: non-finite"):
        ADVANTAGE_FN.get("jsd")(s, t, torch.ones_like(s))
    with pytest.raises(AlgorithmInputError, match="lambda_coef"):
        ADVANTAGE_FN.get("jsd")(s, t, mask, lambda_coef=1.5)


def test_on_policy_distill_agrees_with_verl_distillation_advantage() -> None:
    """verl's on-policy distillation with a policy gradient takes advantages = -(k1 estimate of
    KL(student || teacher)) per token (verl.trainer.distillation.losses, loss_mode k1)."""
    core = pytest.importorskip("verl.trainer.ppo.core_algos")
    for seed in range(5):
        s, t, m = token_batch(seed, rows=6, width=9)
        ours, _ = ADVANTAGE_FN.get("on_policy_distill")(t64(s), t64(t), t64(m))
        theirs = -core.kl_penalty(logprob=t64(s), ref_logprob=t64(t), kl_penalty="k1") * t64(m)
        assert float((ours - theirs).abs().max()) < 1e-12


# -- CHORD ---------------------------------------------------------------------------------


def mu_reference(step: int, warmup: int, decay: int, peak: float, valley: float) -> float:
    if warmup and step < warmup:
        return peak * step / warmup
    if step >= warmup + decay:
        return valley
    return valley + (peak - valley) * (1 + math.cos(math.pi * (step - warmup) / decay)) / 2


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 60),
    st.integers(0, 20),
    st.integers(0, 30),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
)
def test_chord_mu_follows_warmup_cosine_decay_then_valley(step, warmup, decay, peak, valley):
    assert chord_mu(step, warmup, decay, peak, valley) == pytest.approx(
        mu_reference(step, warmup, decay, peak, valley), abs=1e-12
    )


def test_chord_mu_landmarks() -> None:
    args = {"mu_warmup_steps": 4, "mu_decay_steps": 10, "mu_peak": 0.9, "mu_valley": 0.05}
    assert chord_mu(0, **args) == 0.0
    assert chord_mu(2, **args) == pytest.approx(0.45)
    assert chord_mu(4, **args) == pytest.approx(0.9)  # the peak where the decay starts
    assert chord_mu(9, **args) == pytest.approx((0.9 + 0.05) / 2)  # half way down
    assert chord_mu(14, **args) == pytest.approx(0.05) and chord_mu(100, **args) == 0.05


def chord_reference(lp, old, adv, mask, expert, mu, phi: bool, token_level: bool) -> float:
    """(1 - μ) × PPO token-mean over learner tokens + μ × SFT over expert tokens (token mean, or
    per-row mean then mean over rows), φ(p) = p (1 - p) weighting -log p."""
    ppo = ppo_token_losses(lp, old, adv)
    learner = [(b, i) for b in range(len(expert)) if not expert[b] for i in range(lp.shape[1])]
    learner = [(b, i) for b, i in learner if mask[b, i]]
    l_rl = math.fsum(ppo[b, i] for b, i in learner) / len(learner)

    def sft(b: int, i: int) -> float:
        p = math.exp(lp[b, i])
        return -lp[b, i] * (p * (1 - p) if phi else 1.0)

    rows = [b for b in range(len(expert)) if expert[b] and mask[b].sum() > 0]
    if token_level:
        cells = [(b, i) for b in rows for i in range(lp.shape[1]) if mask[b, i]]
        l_sft = math.fsum(sft(b, i) for b, i in cells) / len(cells)
    else:
        per_row = [
            math.fsum(sft(b, i) for i in range(lp.shape[1]) if mask[b, i]) / mask[b].sum()
            for b in rows
        ]
        l_sft = math.fsum(per_row) / len(per_row)
    return (1 - mu) * l_rl + mu * l_sft


def chord_batch(seed: int):
    rng = np.random.default_rng(seed)
    rows, width = 7, 5
    lp = -rng.random((rows, width)) * 2
    old = lp + rng.normal(0, 0.3, (rows, width))
    adv = np.repeat(rng.normal(0, 1, (rows, 1)), width, axis=1)
    mask = (rng.random((rows, width)) > 0.3).astype(np.float64)
    mask[:, 0] = 1.0
    expert = np.zeros(rows, dtype=bool)
    expert[[2, 5]] = True
    return lp, old, adv, mask, expert


def chord_loss(**args):
    return build_loss(
        resolve_algorithm(
            {
                "algorithm_type": "mix_chord",
                "repeat_times": 2,
                "kl_loss_fn": "none",
                "policy_loss_fn_args": args,
            }
        )
    )


@pytest.mark.parametrize("phi", [True, False])
@pytest.mark.parametrize("token_level", [True, False])
@pytest.mark.parametrize("step", [1, 3, 8])
def test_chord_loss_matches_its_reference_and_splits_into_micro_batches(phi, token_level, step):
    args = {
        "mu_warmup_steps": 2,
        "mu_decay_steps": 5,
        "mu_peak": 0.8,
        "mu_valley": 0.2,
        "enable_phi_function": phi,
        "use_token_level_loss_in_sft": token_level,
    }
    loss_fn = chord_loss(**args)
    lp, old, adv, mask, expert = chord_batch(step)
    mu = mu_reference(step, 2, 5, 0.8, 0.2)
    want = chord_reference(lp, old, adv, mask, expert, mu, phi, token_level)

    def run(rows: list[int], share: float, units: BatchUnits | None) -> torch.Tensor:
        logprob = torch.tensor(lp[rows], dtype=torch.float64, requires_grad=True)
        batch = LossBatch(
            t64(mask[rows]),
            old_logprob=t64(old[rows]),
            advantages=t64(adv[rows]),
            expert=torch.tensor(expert[rows]),
            batch_units=units,
            share=share,
            step=step,
        )
        loss, metrics = loss_fn(logprob, None, batch)
        assert metrics["mu"] == pytest.approx(mu)
        return loss.detach()

    whole = run(list(range(7)), 1.0, None)
    assert float(whole) == pytest.approx(want, abs=1e-12)
    units = BatchUnits.of(list(mask), expert)
    split = [[0, 1, 2], [3, 4, 5, 6]]
    tokens = [mask[r].sum() for r in split]
    shares = [c / sum(tokens) for c in tokens]
    total = sum(float(run(r, sh, units)) * sh for r, sh in zip(split, shares, strict=True))
    assert total == pytest.approx(want, abs=1e-12)


def test_chord_phi_is_held_constant_in_the_gradient() -> None:
    lp = torch.tensor([[-0.7]], dtype=torch.float64, requires_grad=True)
    batch = LossBatch(
        torch.ones(1, 1, dtype=torch.float64),
        old_logprob=lp.detach().clone(),
        advantages=torch.zeros(1, 1, dtype=torch.float64),
        expert=torch.tensor([True]),
    )
    loss, _ = chord_loss(mu_peak=1.0, mu_valley=1.0)(lp, None, batch)
    loss.backward()
    p = math.exp(-0.7)
    assert float(lp.grad) == pytest.approx(-p * (1 - p), abs=1e-12)  # d(-lp * φ)/dlp, φ fixed


@pytest.mark.parametrize(
    ("args", "key"),
    [
        ({"mu_peak": 1.5}, "mu_peak"),
        ({"mu_warmup_steps": -1}, "mu_warmup_steps"),
        ({"mu_decay_steps": 2.5}, "mu_decay_steps"),
    ],
)
def test_chord_refuses_a_schedule_out_of_range(args, key) -> None:
    with pytest.raises((AlgorithmInputError, ConfigError), match=key):
        chord_loss(**args)


def test_chord_refuses_trinitys_internal_batch_args_by_name() -> None:
    with pytest.raises(ConfigError, match="policy_loss_fn_args.train_batch_size_expert"):
        chord_loss(train_batch_size_expert=4)


def test_mix_keeps_its_fixed_mu_whatever_the_step() -> None:
    spec = resolve_algorithm({"algorithm_type": "mix", "repeat_times": 2, "kl_loss_fn": "none"})
    lp, old, adv, mask, expert = chord_batch(0)
    losses = []
    for step in (1, 50):
        batch = LossBatch(
            t64(mask),
            old_logprob=t64(old),
            advantages=t64(adv),
            expert=torch.tensor(expert),
            step=step,
        )
        losses.append(float(build_loss(spec)(t64(lp), None, batch)[0]))
    assert losses[0] == losses[1]


def test_trinitys_jsd_chunk_size_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"algorithm\.advantage_fn_args\.chunk_size"):
        resolve_algorithm({"algorithm_type": "jsd", "advantage_fn_args": {"chunk_size": 4}})


def test_the_engine_gives_chord_its_step_and_a_resumed_engine_goes_on_from_it() -> None:
    """Through the real engine and StepTrainer: μ of each step is the schedule at the engine's
    step (1, 2, 3, ...), and an engine restored from the saved training state continues at the
    step it was saved at, not at 1."""

    from rft.buffer.sampler import SampledBatch, SamplerCounters
    from rft.consumers.trainer.train_step import StepTrainer
    from rft.engines.models import ModelSpec, load_model
    from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine
    from tests.unit.test_expert_rows_loss import on_policy_rows

    args = {"mu_warmup_steps": 2, "mu_decay_steps": 4, "mu_peak": 0.6, "mu_valley": 0.05}
    spec = resolve_algorithm(
        {"algorithm_type": "mix_chord", "kl_loss_fn": "none", "policy_loss_fn_args": args}
    )
    model, tok = load_model(ModelSpec("tiny", dtype="float64"))
    layout = [("a", 2, 0.0, False), ("x", 1, 0.0, True), ("a", 2, 1.0, False)]
    rows, _ = on_policy_rows(model, layout)

    def step(engine: TorchTrainerEngine) -> float:
        values = StepTrainer(spec, build_loss(spec), engine).train(
            SampledBatch(rows, 0, SamplerCounters()), 1
        )
        return values["mu"]

    engine = TorchTrainerEngine(model, TorchTrainerConfig(micro_batch_size=2), tokenizer=tok)
    seen = [step(engine) for _ in range(3)]
    assert seen == pytest.approx([mu_reference(s, 2, 4, 0.6, 0.05) for s in (1, 2, 3)])
    state = engine.training_state()
    resumed = TorchTrainerEngine(
        load_model(ModelSpec("tiny", dtype="float64"))[0],
        TorchTrainerConfig(micro_batch_size=2),
        tokenizer=tok,
    )
    resumed.restore_training_state(state, "the first engine's state")
    assert step(resumed) == pytest.approx(mu_reference(4, 2, 4, 0.6, 0.05))
