"""Algorithms by Trinity-RFT's names: each preset's parts, float64 references of the advantages and
reward shaping they add (reinforce, asymre, DAPO's overlong penalty), and the presets that need
what rft lacks failing at load with what is missing.

The losses the presets select (gspo, cispo, topr, sapo, ...) have their float64 references in
tests/unit/test_off_policy_losses.py; here each preset runs end to end through build_loss.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.algorithms.advantages import ADVANTAGE_FN
from rft.algorithms.objective import Advantages, LossBatch, build_loss, compute_advantages
from rft.algorithms.overlong import overlong_penalty
from rft.algorithms.presets import ALGORITHM_TYPES, resolve_algorithm
from rft.algorithms.tensor_checks import AlgorithmInputError
from rft.catalog import load_config
from rft.config.loader import ConfigValidationError
from rft.errors import ConfigError

RUNNABLE = {
    # name: (advantage_fn, policy_loss_fn, loss_agg_mode)
    "grpo": ("grpo", "ppo", "token-mean"),
    "rloo": ("rloo", "ppo", "token-mean"),
    "reinforceplusplus": ("reinforceplusplus", "ppo", "token-mean"),
    "reinforce_plus_plus": ("reinforceplusplus", "ppo", "token-mean"),
    "opmd": ("opmd", "opmd", "token-mean"),
    "gspo": ("grpo", "gspo", "seq-mean-token-mean"),
    "cispo": ("grpo", "cispo", "token-mean"),
    "sapo": ("grpo", "sapo", "token-mean"),
    "topr": ("reinforce", "topr", "token-mean"),
    "dapo": ("grpo", "ppo", "token-mean"),
    "asymre": ("asymre", "opmd", "token-mean"),
    "raft": (None, "sft", "token-mean"),
    "sft": (None, "sft", "token-mean"),
    "cpt": (None, "sft", "token-mean"),
    "mix_chord": ("grpo", "mix_chord", "token-mean"),
    "chord": ("grpo", "mix_chord", "token-mean"),
}

MISSING = {"gigpo": "environment state"}


@pytest.mark.parametrize("name", sorted(RUNNABLE))
def test_each_runnable_preset_selects_its_parts_and_trains(name: str) -> None:
    advantage_fn, policy_loss_fn, mode = RUNNABLE[name]
    spec = resolve_algorithm({"algorithm_type": name, "repeat_times": 4})
    assert (spec.advantage_fn, spec.policy_loss_fn, spec.effective_loss_agg_mode) == (
        advantage_fn,
        policy_loss_fn,
        mode,
    )
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    mask = torch.ones(8, 3)
    adv, _ = compute_advantages(
        spec, rewards, group, mask, response_lengths=torch.full((8,), 3), max_response_length=16
    )
    lp = torch.full((8, 3), -1.0, dtype=torch.float64, requires_grad=True)
    batch = LossBatch(
        mask, old_logprob=torch.full((8, 3), -1.1, dtype=torch.float64), advantages=adv
    )
    batch.ref_logprob = torch.full((8, 3), -1.05, dtype=torch.float64)
    loss, metrics = build_loss(spec)(lp, torch.ones(8, 3), batch)
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(lp.grad).all()
    assert "loss" in metrics


def test_dapo_preset_is_clip_higher_token_mean_without_kl() -> None:
    spec = resolve_algorithm({"algorithm_type": "dapo", "repeat_times": 4})
    assert dict(spec.policy_loss_fn_args) == {"clip_range_low": 0.2, "clip_range_high": 0.28}
    assert not spec.uses_kl_loss and spec.uses_overlong_penalty


@pytest.mark.parametrize("name", sorted(MISSING))
def test_presets_that_need_what_rft_lacks_say_so(name: str) -> None:
    assert name in ALGORITHM_TYPES
    with pytest.raises(ConfigError, match=rf"algorithm\.algorithm_type: .*{MISSING[name]}"):
        resolve_algorithm({"algorithm_type": name, "repeat_times": 2})
    with pytest.raises(ConfigError, match=MISSING[name]):
        build_loss(name)


@pytest.mark.parametrize("name", ["on_policy_distill", "jsd"])
def test_distillation_presets_take_token_advantages_from_a_teacher(name: str) -> None:
    spec = resolve_algorithm({"algorithm_type": name, "repeat_times": 1})
    assert (spec.advantage_fn, spec.policy_loss_fn) == (name, "ppo")
    assert spec.uses_teacher and not spec.use_reference and spec.min_repeat_times == 1
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    student = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]], dtype=torch.float64)
    teacher = torch.tensor([[-0.5, -3.0, 0.0], [-0.5, 0.0, 0.0]], dtype=torch.float64)
    with pytest.raises(AlgorithmInputError, match="teacher_logprob"):
        compute_advantages(spec, torch.zeros(2), torch.zeros(2, dtype=torch.long), mask, student)
    adv, _ = Advantages(spec)(
        torch.zeros(2), torch.zeros(2, dtype=torch.long), mask, student, teacher_logprob=teacher
    )
    assert (
        abs(float(adv[1, 0])) < 1e-12 and adv[0, 2] == 0
    )  # teacher agrees / off the mask: no push
    lp = student.clone().requires_grad_(True)
    loss, _ = build_loss(spec)(lp, None, LossBatch(mask, old_logprob=student, advantages=adv))
    loss.backward()
    if name == "on_policy_distill":
        # the teacher likes token 0 more than the student did, token 1 less
        assert adv[0, 0] > 0 > adv[0, 1]
        assert lp.grad[0, 0] < 0 < lp.grad[0, 1]  # descent raises token 0, lowers token 1
    else:
        # a sampled-token JSD is never positive (log of a mixture >= mixture of logs): every
        # token the two disagree on gets a positive advantage
        assert adv[0, 0] > 0 and adv[0, 1] > 0
        assert lp.grad[0, 0] < 0 and lp.grad[0, 1] < 0


@pytest.mark.parametrize("key", ["kl_loss_fn_args", "kl_penalty_fn_args"])
def test_a_teacher_and_a_kl_reference_are_refused_together(key: str) -> None:
    fn = "kl_loss_fn" if key == "kl_loss_fn_args" else "kl_penalty_fn"
    with pytest.raises(ConfigError, match=rf"algorithm\.{fn}: .*teacher"):
        resolve_algorithm({"algorithm_type": "on_policy_distill", fn: "k2", key: {"kl_coef": 0.1}})


def test_selecting_one_fails_when_the_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "project: p\nname: n\nmode: train\nmodel: {model_path: tiny}\nbuffer: {batch_size: 2}\n"
        "algorithm:\n  algorithm_type: gigpo\n  repeat_times: 2\n"
    )
    with pytest.raises(ConfigValidationError) as err:
        load_config(path)
    assert "run.yaml:7: `algorithm.algorithm_type` 'gigpo' GiGPO's step-level" in str(err.value)


# -- advantages and reward shaping, float64 references ----------------------------------------


@st.composite
def grouped_rewards(draw: st.DrawFn) -> tuple[list[float], list[int]]:
    n = draw(st.integers(1, 12))
    rewards = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, -1.0, 2.5]), min_size=n, max_size=n))
    groups = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    return rewards, groups


@settings(max_examples=80, deadline=None)
@given(grouped_rewards(), st.sampled_from([-0.1, 0.0, 0.3]))
def test_asymre_advantage_matches_reference(data, shift: float) -> None:
    rewards, groups = data
    want = []
    for r, g in zip(rewards, groups, strict=True):
        members = [x for x, h in zip(rewards, groups, strict=True) if h == g]
        baseline = math.fsum(members) / len(members) + shift if len(members) > 1 else 0.0
        want.append(r - baseline)
    got, _ = ADVANTAGE_FN.get("asymre")(
        torch.tensor(rewards, dtype=torch.float64), torch.tensor(groups), baseline_shift=shift
    )
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(grouped_rewards())
def test_reinforce_advantage_is_the_reward_and_reinforceplusplus_is_the_old_name(data) -> None:
    rewards, groups = data
    r = torch.tensor(rewards, dtype=torch.float64)
    g = torch.tensor(groups)
    got, _ = ADVANTAGE_FN.get("reinforce")(r, g)
    assert got.tolist() == rewards
    a, _ = ADVANTAGE_FN.get("reinforceplusplus")(r, g)
    b, _ = ADVANTAGE_FN.get("reinforce_plus_plus")(r, g)
    assert torch.equal(a, b)


def overlong_ref(length: int, limit: int, cache: int, factor: float) -> float:
    if length <= limit - cache:
        return 0.0
    if length <= limit:
        return factor * ((limit - cache) - length) / cache
    return -factor


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=10),
    st.integers(1, 32),
    st.data(),
    st.sampled_from([1.0, 0.5]),
)
def test_overlong_penalty_matches_dapo_formula(lengths, limit, data, factor) -> None:
    cache = data.draw(st.integers(1, limit))
    got = overlong_penalty(torch.tensor(lengths), limit, cache, factor)
    want = [overlong_ref(n, limit, cache, factor) for n in lengths]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-15)
    assert got.dtype == torch.float64


def test_overlong_penalty_default_cache_is_a_fifth_of_the_limit() -> None:
    # limit 20: the ramp covers lengths 17..20 (cache 4)
    got = overlong_penalty(torch.tensor([16, 17, 18, 20, 21]), 20)
    np.testing.assert_allclose(got.numpy(), [0.0, -0.25, -0.5, -1.0, -1.0])


def test_dapo_advantages_see_the_overlong_penalty() -> None:
    """Two rollouts of one task, both correct: without the penalty their GRPO advantages are 0;
    with DAPO the one that ran into the limit is pushed down relative to the short one."""
    spec = resolve_algorithm({"algorithm_type": "dapo", "repeat_times": 2})
    rewards = torch.tensor([1.0, 1.0], dtype=torch.float64)
    group = torch.tensor([0, 0])
    mask = torch.ones(2, 10)
    lengths = torch.tensor([4, 10])
    adv, metrics = compute_advantages(
        spec, rewards, group, mask, response_lengths=lengths, max_response_length=10
    )
    shaped = [1.0, 1.0 + overlong_ref(10, 10, 2, 1.0)]
    mean = sum(shaped) / 2
    std = math.sqrt(sum((x - mean) ** 2 for x in shaped) / 2)
    want = [(x - mean) / (std + 1e-6) for x in shaped]
    np.testing.assert_allclose(adv[:, 0].numpy(), want, rtol=1e-9)
    assert metrics["overlong_frac"] == 0.5
    grpo = resolve_algorithm({"algorithm_type": "grpo", "repeat_times": 2})
    plain, _ = compute_advantages(grpo, rewards, group, mask)
    assert torch.equal(plain, torch.zeros_like(plain))


def test_overlong_penalty_without_a_limit_says_what_is_missing() -> None:
    from rft.algorithms.tensor_checks import AlgorithmInputError

    spec = resolve_algorithm({"algorithm_type": "dapo", "repeat_times": 2})
    with pytest.raises(AlgorithmInputError, match="response_lengths.*max_response_length"):
        compute_advantages(spec, torch.ones(2), torch.tensor([0, 0]), torch.ones(2, 3))
    with pytest.raises(AlgorithmInputError, match="response_lengths"):
        compute_advantages(
            spec, torch.ones(2), torch.tensor([0, 0]), torch.ones(2, 3), max_response_length=3
        )
