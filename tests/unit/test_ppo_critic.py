"""PPO with a critic: GAE and the clipped value loss against float64 references written out
loop by loop, the `ppo` preset and its config keys (use_critic, critic_model_path, the `critic`
section), and the torch engine training a critic beside the policy on a tiny model."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.algorithms.advantages import ADVANTAGE_FN
from rft.algorithms.gae import gae_advantage, masked_whiten
from rft.algorithms.objective import Advantages, build_loss
from rft.algorithms.presets import resolve_algorithm
from rft.algorithms.tensor_checks import AlgorithmInputError
from rft.algorithms.value_loss import clipped_value_loss, explained_variance
from rft.catalog import load_config
from rft.config import ConfigValidationError, ConfigWarning
from rft.consumers.trainer.trainer import critic_settings
from rft.engines.critic import Critic, CriticSettings
from rft.engines.models import ModelSpec, load_model
from rft.engines.trainer import RowRewards, TorchTrainerConfig, TorchTrainerEngine, TrainBatch
from rft.errors import ConfigError
from tests.unit.config_samples import MINIMAL

# -- GAE ---------------------------------------------------------------------------------------


def reference_gae(
    rewards: list[list[float]],
    values: list[list[float]],
    mask: list[list[int]],
    gamma: float,
    lam: float,
) -> tuple[list[list[float]], list[list[float]]]:
    """GAE row by row over the indices of the mask-1 tokens, in plain float arithmetic."""
    adv_rows, ret_rows = [], []
    for r, v, m in zip(rewards, values, mask, strict=True):
        steps = [t for t, on in enumerate(m) if on]
        adv = [0.0] * len(m)
        ret = [0.0] * len(m)
        running = 0.0
        for k in reversed(range(len(steps))):
            t = steps[k]
            next_value = v[steps[k + 1]] if k + 1 < len(steps) else 0.0
            delta = r[t] + gamma * next_value - v[t]
            running = delta + gamma * lam * running
            adv[t] = running
            ret[t] = running + v[t]
        adv_rows.append(adv)
        ret_rows.append(ret)
    return adv_rows, ret_rows


@st.composite
def token_batches(draw: st.DrawFn) -> tuple[list[list[float]], list[list[float]], list[list[int]]]:
    rows = draw(st.integers(1, 5))
    width = draw(st.integers(1, 7))
    floats = st.floats(-3, 3, allow_nan=False, width=64)
    rewards = [draw(st.lists(floats, min_size=width, max_size=width)) for _ in range(rows)]
    values = [draw(st.lists(floats, min_size=width, max_size=width)) for _ in range(rows)]
    mask = [
        draw(st.lists(st.sampled_from([0, 1, 1]), min_size=width, max_size=width))
        for _ in range(rows)
    ]
    return rewards, values, mask


@settings(max_examples=120, deadline=None)
@given(token_batches(), st.sampled_from([1.0, 0.9, 0.0]), st.sampled_from([1.0, 0.95, 0.0]))
def test_gae_matches_the_loop_reference(data, gamma: float, lam: float) -> None:
    rewards, values, mask = data
    want_adv, want_ret = reference_gae(rewards, values, mask, gamma, lam)
    t = {
        k: torch.tensor(v, dtype=torch.float64)
        for k, v in (("r", rewards), ("v", values), ("m", mask))
    }
    targets, _ = gae_advantage(t["r"], t["v"], t["m"], gamma=gamma, lam=lam, whiten=False)
    np.testing.assert_allclose(targets.advantages.numpy(), want_adv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(targets.returns.numpy(), want_ret, rtol=1e-12, atol=1e-12)
    whitened, _ = gae_advantage(t["r"], t["v"], t["m"], gamma=gamma, lam=lam)
    flat = [
        a for row, m in zip(want_adv, mask, strict=True) for a, on in zip(row, m, strict=True) if on
    ]
    if len(flat) > 1:
        mean = math.fsum(flat) / len(flat)
        var = math.fsum((a - mean) ** 2 for a in flat) / (len(flat) - 1)
        want_w = [
            [
                (a - mean) / math.sqrt(var + 1e-8) if on else 0.0
                for a, on in zip(row, m, strict=True)
            ]
            for row, m in zip(want_adv, mask, strict=True)
        ]
        np.testing.assert_allclose(whitened.advantages.numpy(), want_w, rtol=1e-9, atol=1e-9)


def test_gae_with_gamma_and_lambda_one_is_the_reward_to_go_minus_the_value() -> None:
    r = torch.tensor([[0.0, 0.5, 0.0, 1.0]], dtype=torch.float64)
    v = torch.tensor([[0.2, 0.4, -0.1, 0.3]], dtype=torch.float64)
    m = torch.tensor([[1, 1, 0, 1]])
    targets, _ = gae_advantage(r, v, m, whiten=False)
    # the mask-0 token's reward and value do not count
    assert targets.advantages[0].tolist() == pytest.approx([1.5 - 0.2, 1.5 - 0.4, 0.0, 1.0 - 0.3])
    assert targets.returns[0].tolist() == pytest.approx([1.5, 1.5, 0.0, 1.0])


def test_gae_refuses_a_discount_outside_zero_one() -> None:
    one = torch.ones(1, 2)
    with pytest.raises(AlgorithmInputError, match=r"advantage_fn_args\.gamma"):
        gae_advantage(one, one, one, gamma=1.5)


def test_masked_whiten_leaves_masked_tokens_out_of_the_statistics() -> None:
    x = torch.tensor([[1.0, 3.0, 100.0]], dtype=torch.float64)
    m = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    w = masked_whiten(x, m)
    assert w[0, :2].tolist() == pytest.approx([-1 / math.sqrt(2 + 1e-8), 1 / math.sqrt(2 + 1e-8)])


# -- value loss and explained variance ---------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(token_batches(), st.sampled_from([0.05, 0.5, 2.0]))
def test_clipped_value_loss_matches_the_loop_reference(data, clip: float) -> None:
    returns, old, mask = data
    rng = np.random.default_rng(len(returns))
    new = [[o + float(rng.normal()) for o in row] for row in old]
    terms, clipped_count, count = [], 0, 0
    for v_row, r_row, o_row, m_row in zip(new, returns, old, mask, strict=True):
        for v, r, o, on in zip(v_row, r_row, o_row, m_row, strict=True):
            if not on:
                continue
            vc = min(max(v, o - clip), o + clip)
            terms.append(max((v - r) ** 2, (vc - r) ** 2))
            clipped_count += (vc - r) ** 2 > (v - r) ** 2
            count += 1
    want = 0.5 * math.fsum(terms) / count if count else 0.0
    v = torch.tensor(new, dtype=torch.float64, requires_grad=True)
    loss, metrics = clipped_value_loss(
        v,
        torch.tensor(returns, dtype=torch.float64),
        torch.tensor(old, dtype=torch.float64),
        torch.tensor(mask),
        cliprange_value=clip,
    )
    assert float(loss.detach()) == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert metrics["vf_clipfrac"] == pytest.approx(clipped_count / count if count else 0.0)
    loss.backward()
    assert torch.isfinite(v.grad).all()


def test_a_clipped_value_gets_no_gradient_when_the_clipped_term_is_larger() -> None:
    # old 0, return 2, new 1.5 clipped to 0.5: the clipped term (1.5^2) wins, constant in v
    v = torch.tensor([[1.5]], dtype=torch.float64, requires_grad=True)
    loss, metrics = clipped_value_loss(
        v, torch.tensor([[2.0]]).double(), torch.zeros(1, 1).double(), torch.ones(1, 1), 0.5
    )
    loss.backward()
    assert float(loss) == pytest.approx(0.5 * 1.5**2) and float(v.grad) == 0.0
    assert metrics["vf_clipfrac"] == 1.0


def test_explained_variance() -> None:
    ret = torch.tensor([[1.0, 2.0, 3.0, 50.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0]])
    assert explained_variance(ret, ret, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(ret, 2.0), ret, mask) == pytest.approx(0.0)
    assert explained_variance(-ret, ret, mask) < 0
    assert math.isnan(explained_variance(ret, torch.ones_like(ret), mask))


# -- preset and config -------------------------------------------------------------------------


def test_ppo_preset_is_gae_from_a_critic_and_the_clipped_surrogate() -> None:
    spec = resolve_algorithm({"algorithm_type": "ppo", "repeat_times": 1})
    assert (spec.advantage_fn, spec.policy_loss_fn) == ("ppo", "ppo")
    assert dict(spec.advantage_fn_args) == {"gamma": 1.0, "lam": 1.0}
    assert spec.use_critic and ADVANTAGE_FN.spec("gae").critic
    assert not resolve_algorithm({"algorithm_type": "grpo", "repeat_times": 2}).use_critic
    build_loss(spec)  # the policy side composes as any preset's


def test_use_critic_must_agree_with_the_advantage_fn() -> None:
    with pytest.raises(ConfigError, match=r"algorithm\.use_critic: false, but advantage_fn 'ppo'"):
        resolve_algorithm({"algorithm_type": "ppo", "use_critic": False})
    with pytest.raises(ConfigError, match=r"algorithm\.use_critic: true, but advantage_fn 'grpo'"):
        resolve_algorithm({"algorithm_type": "grpo", "use_critic": True, "repeat_times": 2})
    assert resolve_algorithm({"algorithm_type": "ppo", "use_critic": True}).use_critic
    with pytest.raises(ConfigError, match=r"advantage_fn_args\.gama"):
        resolve_algorithm({"algorithm_type": "ppo", "advantage_fn_args": {"gama": 0.9}})


def _config(tmp_path: Path, extra: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL.replace("algorithm:\n  repeat_times: 2\n", extra))
    return load_config(path)


PPO = "algorithm:\n  algorithm_type: ppo\n  repeat_times: 2\n"


def test_the_critic_section_reaches_the_critic(tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        PPO
        + "  use_critic: true\n  advantage_fn_args: {gamma: 0.99, lam: 0.95}\n"
        + "critic:\n  optim: {lr: 3.0e-5, betas: [0.8, 0.9], weight_decay: 0.0}\n"
        + "  cliprange_value: 0.2\n  grad_clip: 2.0\n  loss_agg_mode: seq-mean-token-mean\n",
    )
    assert cfg.model.critic_model_path is None  # the policy's model then
    assert critic_settings(cfg) == CriticSettings(
        lr=3e-5,
        betas=(0.8, 0.9),
        weight_decay=0.0,
        grad_clip=2.0,
        cliprange_value=0.2,
        loss_agg_mode="seq-mean-token-mean",
    )
    assert dict(resolve_algorithm(cfg.algorithm).advantage_fn_args) == {"gamma": 0.99, "lam": 0.95}


@pytest.mark.parametrize(
    ("extra", "where", "why"),
    [
        ("critic:\n  ppo_epochs: 2\n", "critic.ppo_epochs", "one critic update per train step"),
        ("critic:\n  optim: {warmup_style: cosine}\n", "critic.optim.warmup_style", "constant"),
        ("model:\n  critic_model_path: /no/such/dir\n", "model.critic_model_path", "neither"),
        ("trainer:\n  trainer_type: fsdp2\n", "trainer.trainer_type", "cannot train a critic"),
        ("critic:\n  loss_agg_mode: nope\n", "critic.loss_agg_mode", "nope"),
    ],
)
def test_what_the_critic_cannot_do_is_refused_at_load(
    tmp_path: Path, extra: str, where: str, why: str
) -> None:
    text = PPO + extra
    if extra.startswith("model:"):  # merge into the sample's model section
        text = PPO
    path = tmp_path / "run.yaml"
    body = MINIMAL.replace("algorithm:\n  repeat_times: 2\n", text)
    if extra.startswith("model:"):
        body = body.replace(
            "  model_path: tiny\n", "  model_path: tiny\n  critic_model_path: /no/such/dir\n"
        )
    path.write_text(body)
    with pytest.raises(ConfigValidationError) as err:
        load_config(path)
    assert where in str(err.value) and why in str(err.value)


# -- the torch engine with a critic ------------------------------------------------------------


# the engines here hold no reference model
NO_KL = {"algorithm_type": "ppo", "kl_loss_fn": "none"}


def _engine(seed: int = 3, lr: float = 1e-2, critic_lr: float = 1e-3) -> TorchTrainerEngine:
    model, tok = load_model(ModelSpec("tiny", seed=seed, dtype="float64"))
    critic_lm, _ = load_model(ModelSpec("tiny", seed=seed + 1, dtype="float64"))
    engine = TorchTrainerEngine(model, TorchTrainerConfig(lr=lr, micro_batch_size=2), tokenizer=tok)
    engine.attach_critic(
        Critic.of_lm(critic_lm, CriticSettings(lr=critic_lr, cliprange_value=10.0))
    )
    return engine


def _rollouts(seed: int = 0, token_rewards: bool = False) -> TrainBatch:
    rng = np.random.default_rng(seed)
    prompts, responses, masks, logprobs, per_token = [], [], [], [], []
    for _ in range(4):
        prompts.append(rng.integers(3, 250, int(rng.integers(3, 7))).tolist())
        n = int(rng.integers(2, 6))
        responses.append(rng.integers(3, 250, n).tolist())
        masks.append([1] * n)
        logprobs.append([-5.0] * n)
        per_token.append(rng.normal(size=n).tolist() if token_rewards else None)
    return TrainBatch(
        prompt_ids=prompts,
        response_ids=responses,
        old_logprobs=logprobs,
        action_mask=masks,
        rewards=RowRewards(
            values=torch.tensor([1.0, 0.0, 1.0, 0.0]),
            group_index=torch.arange(4),
            response_lengths=torch.tensor([float(len(r)) for r in responses]),
        ),
        token_rewards=per_token if token_rewards else None,
    )


def test_a_ppo_step_trains_the_critic_towards_the_returns() -> None:
    engine = _engine()
    assert engine.critic is not None
    spec = resolve_algorithm(NO_KL)
    loss, advantages = build_loss(spec), Advantages(spec)
    before = {k: v.clone() for k, v in engine.critic.state_dict().items()}
    losses = []
    for _ in range(6):
        metrics = engine.train_step(_rollouts(), loss, advantages)
        losses.append(metrics["critic/vf_loss"])
    after = engine.critic.state_dict()
    assert not torch.equal(before["value_head.weight"], after["value_head.weight"])
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("decoder."))
    assert losses[-1] < losses[0]  # the value head learns the four returns
    assert {"critic/grad_norm", "critic/vf_clipfrac", "critic/explained_variance"} <= set(metrics)
    assert {"adv/returns_mean", "adv/values_mean"} <= set(metrics)
    assert engine.critic.step == 6 and engine.step == 6


def test_the_first_advantages_come_from_the_token_rewards_when_rows_have_them() -> None:
    spec = resolve_algorithm({**NO_KL, "advantage_fn_args": {"lam": 1.0}})
    outcome, per_token = _rollouts(token_rewards=False), _rollouts(token_rewards=True)
    for batch in (outcome, per_token):
        _engine(lr=0.0).train_step(batch, build_loss(spec), Advantages(spec))
    # with values 0 (a zero head) the returns are the reward-to-go of each row's rewards
    for batch, rewards in (
        (
            outcome,
            [
                [0.0] * (len(r) - 1) + [float(v)]
                for r, v in zip(outcome.response_ids, outcome.rewards.values, strict=True)
            ],
        ),
        (per_token, per_token.token_rewards),
    ):
        assert batch.critic_targets is not None
        for row, r in enumerate(rewards):
            to_go = np.cumsum(np.asarray(r, dtype=np.float64)[::-1])[::-1]
            got = batch.critic_targets.returns[row, : len(r)].numpy()
            np.testing.assert_allclose(got, to_go, rtol=1e-9, atol=1e-9)


def test_the_critic_state_round_trips() -> None:
    engine = _engine()
    spec = resolve_algorithm(NO_KL)
    engine.train_step(_rollouts(), build_loss(spec), Advantages(spec))
    critic = engine.critic
    assert critic is not None
    weights, state = critic.state_dict(), critic.training_state()
    other = _engine(seed=7).critic
    assert other is not None
    other.load_state_dict(weights)
    other.restore_training_state(state, "the first critic's state")
    assert all(torch.equal(other.state_dict()[k], v) for k, v in weights.items())
    assert other.step == critic.step == 1
    moments = critic.optimizer.state_dict()["state"]
    assert all(
        torch.equal(other.optimizer.state_dict()["state"][i]["exp_avg"], s["exp_avg"])
        for i, s in moments.items()
    )


def test_verls_worker_plumbing_in_the_critic_section_loads_with_a_warning(tmp_path: Path) -> None:
    with pytest.warns(ConfigWarning, match=r"critic\.strategy` is accepted but ignored"):
        cfg = _config(tmp_path, PPO + "critic:\n  strategy: fsdp\n  cliprange_value: 0.3\n")
    assert cfg.critic.cliprange_value == 0.3
