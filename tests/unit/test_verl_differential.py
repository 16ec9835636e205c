"""rft's algorithm functions against verl's (`verl.trainer.ppo.core_algos` 0.9.1, the reference
library) on the same random float64 inputs: advantage estimators (GAE from a critic included),
policy losses (value and gradient), the clipped value loss, loss aggregation, KL estimators and
logprob / entropy from logits. Where both compute the same quantity they agree within 1e-6. Where they differ on purpose, the test states the
difference and checks that it is exactly that difference:

- GRPO divides by the population std of the group (rft: a group of two has the spread a user
  expects, a group of one std 0) where verl divides by the sample std (n - 1);
- REINFORCE++ whitens by the population std + epsilon (rft) or rsqrt(sample variance + 1e-8)
  (verl);
- a group of one rollout: rft gives advantage 0 (nothing to compare it with), verl's GRPO gives
  r / (1 + epsilon) and its RLOO r;
- rft's ppo applies the dual clip only when clip_ratio_c is set, verl's always (default 3).

The `verl/<name>` parts (`algorithm.implementation: verl`) are checked through the registries
too. The table of pairs and their largest difference is printed when the module ends.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rft.algorithms.advantages import ADVANTAGE_FN
from rft.algorithms.aggregation import aggregate_loss
from rft.algorithms.kl import KL_ESTIMATORS
from rft.algorithms.objective import LossBatch, build_loss, compute_advantages
from rft.algorithms.policy_losses import POLICY_LOSS_FN
from rft.algorithms.presets import resolve_algorithm
from rft.catalog import load_config
from rft.config import ConfigValidationError
from rft.engines.logprobs import logprobs_and_entropy_from_logits
from tests.unit.config_samples import MINIMAL

verl_core = pytest.importorskip("verl.trainer.ppo.core_algos")
verl_F = pytest.importorskip("verl.utils.torch_functional")

TOLERANCE = 1e-6
MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
TABLE: list[tuple[str, str, float, str]] = []


@pytest.fixture(scope="module", autouse=True)
def table(pytestconfig):  # type: ignore[no-untyped-def]
    yield
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
    width = max(len(r[0]) for r in TABLE) if TABLE else 10
    lines = [
        "",
        "rft vs verl 0.9.1 (float64, same random inputs)",
        f"{'rft':<{width}}  {'verl':<52}  {'max |diff|':>10}  note",
    ]
    for rft_name, verl_name, diff, note in TABLE:
        lines.append(f"{rft_name:<{width}}  {verl_name:<52}  {diff:>10.3g}  {note}")
    with capture.global_and_fixture_disabled():  # shown without -s too
        print("\n".join(lines))


def record(rft_name: str, verl_name: str, diff: float, note: str = "") -> float:
    TABLE.append((rft_name, verl_name, diff, note))
    return diff


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def group_rewards(seed: int, groups: int = 6, size: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    rewards = torch.randn(groups * size, generator=gen(seed), dtype=torch.float64)
    index = torch.arange(groups).repeat_interleave(size)
    perm = torch.randperm(groups * size, generator=gen(seed + 1))  # groups interleaved
    return rewards[perm], index[perm]


def verl_outcome(fn, rewards: torch.Tensor, index: torch.Tensor, **kwargs) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """verl's estimator on one-token responses, as rft's verl parts call it."""
    adv, _ = fn(
        rewards[:, None].clone(),
        torch.ones(len(rewards), 1, dtype=rewards.dtype),
        index=index.numpy(),
        **kwargs,
    )
    return adv[:, 0]


def per_row(stat, rewards: torch.Tensor, index: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def]
    return torch.stack([stat(rewards[index == g]) for g in index.tolist()])


# -- advantages ----------------------------------------------------------------------------------


def token_rewards_values_mask(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[6, 9] token rewards and values, a mask with environment holes and right padding."""
    g = gen(seed)
    rewards = torch.randn(6, 9, generator=g, dtype=torch.float64)
    values = torch.randn(6, 9, generator=g, dtype=torch.float64)
    mask = (torch.rand(6, 9, generator=g) > 0.25).to(torch.float64)
    for row, length in enumerate((9, 7, 5, 9, 3, 8)):
        mask[row, length:] = 0
    mask[:, 0] = 1
    return rewards, values, mask


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)])
def test_gae_agrees_with_verls(gamma: float, lam: float) -> None:
    rewards, values, mask = token_rewards_values_mask(int(gamma * 100 + lam * 10))
    ours, _ = ADVANTAGE_FN.get("ppo")(rewards, values, mask, gamma=gamma, lam=lam)
    adv, returns = verl_core.compute_gae_advantage_return(
        token_level_rewards=rewards * mask,
        values=values * mask,
        response_mask=mask,
        gamma=gamma,
        lam=lam,
    )
    on = mask.bool()
    diff = max(
        float((ours.advantages - adv)[on].abs().max()),
        float((ours.returns - returns)[on].abs().max()),
    )
    note = "advantages (whitened) and returns on mask-1 tokens"
    assert (
        record(f"ppo (gae) {gamma=} {lam=}", "compute_gae_advantage_return", diff, note)
        <= TOLERANCE
    )
    # the verl-backed part (implementation: verl) computes the same
    theirs, _ = ADVANTAGE_FN.get("verl/ppo")(rewards, values, mask, gamma=gamma, lam=lam)
    assert float((theirs.advantages - ours.advantages)[on].abs().max()) <= TOLERANCE


@pytest.mark.parametrize("mode", MODES)
def test_clipped_value_loss_agrees_with_verls(mode: str) -> None:
    from rft.algorithms.value_loss import clipped_value_loss

    returns, old, mask = token_rewards_values_mask(7)
    new = old + torch.randn(old.shape, generator=gen(8), dtype=torch.float64)
    ours_v = new.clone().requires_grad_(True)
    theirs_v = new.clone().requires_grad_(True)
    ours, metrics = clipped_value_loss(ours_v, returns, old, mask, 0.5, mode)
    theirs, clipfrac = verl_core.compute_value_loss(
        theirs_v, returns, old, mask, cliprange_value=0.5, loss_agg_mode=mode
    )
    ours.backward()
    theirs.backward()
    diff = max(
        abs(float(ours.detach()) - float(theirs.detach())),
        float((ours_v.grad - theirs_v.grad).abs().max()),
        abs(metrics["vf_clipfrac"] - float(clipfrac)),
    )
    assert (
        record(f"clipped_value_loss {mode}", "compute_value_loss", diff, "value, grad, clipfrac")
        <= TOLERANCE
    )


def test_grpo_agrees_without_std_and_differs_only_in_the_std_with_it() -> None:
    rewards, index = group_rewards(0)
    ours, _ = ADVANTAGE_FN.get("grpo")(rewards, index, std_normalize=False)
    theirs = verl_outcome(
        verl_core.compute_grpo_outcome_advantage, rewards, index, norm_adv_by_std_in_grpo=False
    )
    assert (
        record(
            "grpo std_normalize=False",
            "compute_grpo_outcome_advantage (norm=False)",
            float((ours - theirs).abs().max()),
        )
        <= TOLERANCE
    )

    eps = 1e-6
    ours, _ = ADVANTAGE_FN.get("grpo")(rewards, index, epsilon=eps)
    theirs = verl_outcome(verl_core.compute_grpo_outcome_advantage, rewards, index, epsilon=eps)
    raw = float((ours - theirs).abs().max())
    population = per_row(lambda x: x.std(unbiased=False), rewards, index)
    sample = per_row(lambda x: x.std(unbiased=True), rewards, index)
    rescaled = ours * (population + eps) / (sample + eps)
    explained = float((rescaled - theirs).abs().max())
    record("grpo", "compute_grpo_outcome_advantage", raw, "on purpose: population vs sample std")
    record(
        "grpo x (s_pop+e)/(s_sample+e)",
        "compute_grpo_outcome_advantage",
        explained,
        "the std is the whole difference",
    )
    assert raw > 1e-2 and explained <= TOLERANCE


def test_rloo_agrees() -> None:
    rewards, index = group_rewards(2)
    ours, _ = ADVANTAGE_FN.get("rloo")(rewards, index)
    theirs = verl_outcome(verl_core.compute_rloo_outcome_advantage, rewards, index)
    assert (
        record("rloo", "compute_rloo_outcome_advantage", float((ours - theirs).abs().max()))
        <= TOLERANCE
    )


@pytest.mark.parametrize("group_baseline", [False, True])
def test_reinforce_plus_plus_differs_only_in_the_whitening_divisor(group_baseline: bool) -> None:
    from verl.trainer.config import AlgoConfig

    rewards, index = group_rewards(4)
    eps = 1e-6
    ours, _ = ADVANTAGE_FN.get("reinforce_plus_plus")(
        rewards, index, epsilon=eps, group_baseline=group_baseline
    )
    if group_baseline:
        theirs = verl_outcome(
            verl_core.compute_reinforce_plus_plus_baseline_outcome_advantage, rewards, index
        )
        x = rewards - per_row(torch.mean, rewards, index)
        name = "compute_reinforce_plus_plus_baseline_outcome_advantage"
    else:
        adv, _ = verl_core.compute_reinforce_plus_plus_outcome_advantage(
            rewards[:, None].clone(),
            torch.ones(len(rewards), 1, dtype=torch.float64),
            config=AlgoConfig(gamma=1.0),
        )
        theirs, x = adv[:, 0], rewards
        name = "compute_reinforce_plus_plus_outcome_advantage"
    rft_name = f"reinforce_plus_plus{' group_baseline' if group_baseline else ''}"
    raw = record(
        rft_name,
        name,
        float((ours - theirs).abs().max()),
        "on purpose: /(s_pop+e) vs rsqrt(var_sample+1e-8)",
    )
    rescaled = ours * (x.std(unbiased=False) + eps) / torch.sqrt(x.var(unbiased=True) + 1e-8)
    explained = record(
        f"{rft_name} x divisor ratio",
        name,
        float((rescaled - theirs).abs().max()),
        "the divisor is the whole difference",
    )
    assert raw > 1e-3 and explained <= TOLERANCE


def test_a_lone_rollout_gets_no_advantage_in_rft_and_its_reward_in_verl() -> None:
    rewards = torch.tensor([0.3, 1.0, 0.0, 2.5], dtype=torch.float64)
    index = torch.tensor([0, 0, 1, 2])  # groups 1 and 2 hold one rollout each
    lone = index != 0
    for rft_name, verl_fn, expected in (
        ("grpo", verl_core.compute_grpo_outcome_advantage, rewards / (1 + 1e-6)),
        ("rloo", verl_core.compute_rloo_outcome_advantage, rewards),
    ):
        ours, _ = ADVANTAGE_FN.get(rft_name)(rewards, index)
        theirs = verl_outcome(verl_fn, rewards, index)
        assert torch.equal(ours[lone], torch.zeros(2, dtype=torch.float64))
        assert torch.allclose(theirs[lone], expected[lone], atol=1e-12)
        record(
            f"{rft_name} (group of one)",
            verl_fn.__name__,
            float((ours[lone] - theirs[lone]).abs().max()),
            "on purpose: rft 0, verl r",
        )


# -- policy losses --------------------------------------------------------------------------------


def policy_inputs(seed: int, spread: float) -> tuple[torch.Tensor, ...]:
    g = gen(seed)
    shape = (6, 9)
    old = -torch.rand(shape, generator=g, dtype=torch.float64) * 3
    logprob = old + (torch.rand(shape, generator=g, dtype=torch.float64) - 0.5) * 2 * spread
    advantages = torch.randn(shape, generator=g, dtype=torch.float64)
    mask = (torch.rand(shape, generator=g) > 0.25).to(torch.float64)
    mask[:, 0] = 1.0
    mask[5] = 0.0  # a row without trained tokens
    return logprob, old, advantages, mask


def value_and_grad(fn, logprob: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[no-untyped-def]
    x = logprob.clone().requires_grad_(True)
    loss, _ = fn(x, *args, **kwargs)
    (grad,) = torch.autograd.grad(loss, x)
    return loss.detach(), grad


def compare_losses(
    rft_fn,
    verl_fn,
    rft_name: str,
    verl_name: str,
    seed: int,
    spread: float,  # type: ignore[no-untyped-def]
    mode: str,
    rft_args: dict,
    verl_actor: dict,
) -> float:
    from verl.workers.config import ActorConfig

    logprob, old, adv, mask = policy_inputs(seed, spread)
    ours = value_and_grad(rft_fn, logprob, old, adv, mask, mode, **rft_args)
    actor = ActorConfig(strategy="fsdp2", rollout_n=1, ppo_micro_batch_size_per_gpu=1, **verl_actor)

    def theirs_fn(x, *_):  # type: ignore[no-untyped-def]
        return verl_fn(old, x, adv, mask, mode, config=actor)

    theirs = value_and_grad(theirs_fn, logprob)
    diff = max(float((ours[0] - theirs[0]).abs()), float((ours[1] - theirs[1]).abs().max()))
    return record(f"{rft_name} [{mode}]", verl_name, diff, "loss and d/dlogprob")


@pytest.mark.parametrize("mode", MODES)
def test_ppo_agrees_with_vanilla_for_every_aggregation(mode: str) -> None:
    diff = compare_losses(
        POLICY_LOSS_FN.get("ppo"),
        verl_core.compute_policy_loss_vanilla,
        "ppo",
        "compute_policy_loss_vanilla (clip_ratio_c=inf)",
        10,
        0.5,
        mode,
        {"clip_range": 0.2},
        {"clip_ratio": 0.2, "clip_ratio_c": math.inf},
    )
    assert diff <= TOLERANCE


def test_ppo_dual_and_asymmetric_clip_agree() -> None:
    diff = compare_losses(
        POLICY_LOSS_FN.get("ppo"),
        verl_core.compute_policy_loss_vanilla,
        "ppo low=0.1 high=0.3 c=3",
        "compute_policy_loss_vanilla (c=3)",
        11,
        2.5,
        "token-mean",
        {"clip_range_low": 0.1, "clip_range_high": 0.3, "clip_ratio_c": 3.0},
        {"clip_ratio": 0.2, "clip_ratio_low": 0.1, "clip_ratio_high": 0.3, "clip_ratio_c": 3.0},
    )
    assert diff <= TOLERANCE


def test_ppo_without_dual_clip_differs_from_verls_default_on_purpose() -> None:
    logprob, old, adv, mask = policy_inputs(12, 2.5)
    ours, _ = POLICY_LOSS_FN.get("ppo")(logprob, old, adv, mask, "token-mean")
    from verl.workers.config import ActorConfig

    actor = ActorConfig(strategy="fsdp2", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    theirs, _ = verl_core.compute_policy_loss_vanilla(
        old, logprob, adv, mask, "token-mean", config=actor
    )
    diff = record(
        "ppo (no clip_ratio_c)",
        "compute_policy_loss_vanilla (default c=3)",
        float((ours - theirs).abs()),
        "on purpose: rft dual-clips only when asked",
    )
    assert diff > 1e-3  # large ratios with negative advantages: the dual clip binds


@pytest.mark.parametrize(
    ("rft_name", "verl_fn", "mode", "rft_args", "verl_actor"),
    [
        (
            "gspo",
            "compute_policy_loss_gspo",
            "seq-mean-token-mean",
            {"clip_range_low": 3e-4, "clip_range_high": 4e-4},
            {"clip_ratio": 3e-4, "clip_ratio_low": 3e-4, "clip_ratio_high": 4e-4},
        ),
        (
            "cispo",
            "compute_policy_loss_cispo",
            "token-mean",
            {"clip_range_low": 1.0, "clip_range_high": 0.28},
            {"clip_ratio": 1.0, "clip_ratio_low": 1.0, "clip_ratio_high": 0.28},
        ),
        (
            "sapo",
            "compute_policy_loss_sapo",
            "seq-mean-token-mean",
            {"tau_pos": 1.0, "tau_neg": 1.05},
            {"tau_pos": 1.0, "tau_neg": 1.05},
        ),
    ],
)
def test_named_surrogates_agree(rft_name, verl_fn, mode, rft_args, verl_actor) -> None:  # type: ignore[no-untyped-def]
    if rft_name not in POLICY_LOSS_FN:
        pytest.skip(f"rft has no {rft_name} loss in this tree")
    diff = compare_losses(
        POLICY_LOSS_FN.get(rft_name),
        getattr(verl_core, verl_fn),
        rft_name,
        verl_fn,
        13,
        0.01,
        mode,
        rft_args,
        verl_actor,
    )
    assert diff <= TOLERANCE


# -- the pieces under the losses ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_loss_aggregation_agrees(mode: str) -> None:
    loss_mat, _, _, mask = policy_inputs(20, 1.0)
    ours = aggregate_loss(loss_mat, mask, mode)
    theirs = verl_core.agg_loss(loss_mat, mask, mode)
    assert record(f"aggregate_loss [{mode}]", "agg_loss", float((ours - theirs).abs())) <= TOLERANCE


@pytest.mark.parametrize("kind", ["k1", "k2", "k3", "low_var_kl", "abs"])
def test_kl_estimators_agree(kind: str) -> None:
    logprob, ref, _, _ = policy_inputs(30, 1.0)
    ours = KL_ESTIMATORS.get(kind)(logprob, ref)
    theirs = verl_core.kl_penalty(logprob, ref, kind)
    assert (
        record(
            f"KL_ESTIMATORS[{kind}]", f"kl_penalty({kind!r})", float((ours - theirs).abs().max())
        )
        <= TOLERANCE
    )


def test_logprobs_and_entropy_from_logits_agree() -> None:
    logits = torch.randn(3, 7, 50, generator=gen(40), dtype=torch.float64) * 4
    targets = torch.randint(0, 50, (3, 7), generator=gen(41))
    logprob, entropy = logprobs_and_entropy_from_logits(logits, targets, 1.0)
    assert (
        record(
            "logprobs_and_entropy_from_logits: logprob",
            "logprobs_from_logits",
            float((logprob - verl_F.logprobs_from_logits(logits, targets)).abs().max()),
        )
        <= TOLERANCE
    )
    assert (
        record(
            "logprobs_and_entropy_from_logits: entropy",
            "entropy_from_logits",
            float((entropy - verl_F.entropy_from_logits(logits)).abs().max()),
        )
        <= TOLERANCE
    )


# -- through the registries: algorithm.implementation ---------------------------------------------


def test_implementation_verl_swaps_in_verls_functions_with_the_same_args(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    overrides = [
        "algorithm.algorithm_type=rloo",
        "algorithm.repeat_times=4",
        "algorithm.policy_loss_fn_args={clip_range: 0.25}",
    ]
    rft_cfg = load_config(path, overrides)
    verl_cfg = load_config(path, [*overrides, "algorithm.implementation=verl"])
    ours, theirs = resolve_algorithm(rft_cfg.algorithm), resolve_algorithm(verl_cfg.algorithm)
    assert (theirs.advantage_fn, theirs.policy_loss_fn) == ("verl/rloo", "verl/ppo")
    assert (ours.advantage_fn, ours.policy_loss_fn) == ("rloo", "ppo")

    rewards, index = group_rewards(50, groups=4, size=4)
    logprob, old, _, mask = policy_inputs(51, 0.5)
    mask, logprob, old = mask[:4].repeat(4, 1), logprob[:4].repeat(4, 1), old[:4].repeat(4, 1)
    results = []
    for spec in (ours, theirs):
        adv, _ = compute_advantages(spec, rewards, index, mask)
        loss, metrics = build_loss(spec)(logprob, None, LossBatch(mask, old, adv, logprob.detach()))
        results.append((adv, loss, metrics))
    (adv_r, loss_r, m_r), (adv_v, loss_v, m_v) = results
    diff = max(float((adv_r - adv_v).abs().max()), float((loss_r - loss_v).abs()))
    record(
        "implementation: rft (rloo + ppo + k2 KL)",
        "implementation: verl",
        diff,
        "advantages and composed loss",
    )
    assert diff <= TOLERANCE
    assert abs(m_r["ppo_kl"] - m_v["ppo_kl"]) <= TOLERANCE


def test_implementation_verl_refuses_a_part_verl_lacks(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    with pytest.raises(ConfigValidationError, match="algorithm.implementation.*'opmd'"):
        load_config(path, ["algorithm.algorithm_type=opmd", "algorithm.implementation=verl"])
