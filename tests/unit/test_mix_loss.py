"""`algorithm_type: mix` (Trinity-RFT's MIX): L = (1 - μ) L_ppo + μ L_sft over a batch that mixes
rollouts with demonstrations, each kind averaged over its own rows of the whole batch. Float64
references written as per-token / per-row sums, micro-batches (any split, the engine's weights)
adding up to the whole batch, and the real trainer engine applying it."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from rft.algorithms.expert_rows import BatchUnits
from rft.algorithms.objective import LossBatch, build_loss
from rft.algorithms.presets import resolve_algorithm
from rft.buffer.sampler import SampledBatch, SamplerCounters
from rft.consumers.trainer.train_step import StepTrainer
from rft.engines.models import ModelSpec, load_model
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine
from tests.unit.test_expert_rows_loss import on_policy_rows, ppo_token_losses

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]


def kind_mean(per_token: np.ndarray, mask: np.ndarray, rows: np.ndarray, mode: str) -> float:
    """`mode`'s average of `per_token` over the rows selected by `rows` (0 when they hold none)."""
    picked = [r for r in range(len(rows)) if rows[r] and mask[r].sum() > 0]
    if not picked:
        return 0.0
    if mode == "token-mean":
        return math.fsum(
            per_token[r, t] for r in picked for t in range(mask.shape[1]) if mask[r, t]
        ) / sum(mask[r].sum() for r in picked)
    sums = [math.fsum(per_token[r, t] for t in range(mask.shape[1]) if mask[r, t]) for r in picked]
    if mode == "seq-mean-token-mean":
        sums = [s / mask[r].sum() for s, r in zip(sums, picked, strict=True)]
    return math.fsum(sums) / len(picked)


def reference(lp, old, adv, mask, expert, mode, mu) -> float:
    learner = kind_mean(ppo_token_losses(lp, old, adv), mask, ~expert, mode)
    sft = kind_mean(-lp, mask, expert, mode)
    return (1 - mu) * learner + mu * sft


def random_batch(seed: int, rows: int = 7, width: int = 5):
    rng = np.random.default_rng(seed)
    lp = -rng.random((rows, width)) * 2
    old = lp + rng.normal(0, 0.3, (rows, width))
    adv = np.repeat(rng.normal(0, 1, (rows, 1)), width, axis=1)
    mask = (rng.random((rows, width)) > 0.3).astype(np.float64)
    mask[1] = 0  # a row with nothing to train
    expert = np.zeros(rows, dtype=bool)
    expert[[2, 5]] = True
    return lp, old, adv, mask, expert


def mix_loss(mode: str, mu: float):
    spec = resolve_algorithm(
        {
            "algorithm_type": "mix",
            "kl_loss_fn": "none",
            "loss_agg_mode": mode,
            "policy_loss_fn_args": {"mu": mu},
        }
    )
    return build_loss(spec)


def loss_batch(lp, old, adv, mask, expert, rows, units=None, share=1.0):
    t = lambda a: torch.tensor(a[rows], dtype=torch.float64)  # noqa: E731
    return LossBatch(
        t(mask),
        old_logprob=t(old),
        advantages=t(adv),
        expert=torch.tensor(expert[rows]),
        batch_units=units,
        share=share,
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mu", [0.1, 0.5, 0.9])
def test_mix_is_the_mu_weighted_sum_of_the_kinds(mode: str, mu: float) -> None:
    lp, old, adv, mask, expert = random_batch(1)
    everything = np.arange(len(lp))
    logprob = torch.tensor(lp, dtype=torch.float64)
    got, metrics = mix_loss(mode, mu)(
        logprob, None, loss_batch(lp, old, adv, mask, expert, everything)
    )
    assert float(got) == pytest.approx(reference(lp, old, adv, mask, expert, mode, mu), rel=1e-12)
    assert metrics["mu"] == mu and metrics["sft_loss"] == pytest.approx(
        kind_mean(-lp, mask, expert, mode), rel=1e-12
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("split", [[[0, 1, 2], [3, 4, 5, 6]], [[0], [1], [2, 3], [4, 5, 6]]])
def test_micro_batches_weighted_as_the_engine_weighs_them_add_up(mode: str, split) -> None:
    lp, old, adv, mask, expert = random_batch(2)
    units = BatchUnits.of(list(mask), list(expert))
    loss = mix_loss(mode, 0.3)
    whole_lp = torch.tensor(lp, dtype=torch.float64, requires_grad=True)
    whole, _ = loss(whole_lp, None, loss_batch(lp, old, adv, mask, expert, np.arange(len(lp))))
    whole.backward()
    tokens = mask.sum()
    total = 0.0
    grad = torch.zeros_like(whole_lp)
    for rows in split:
        share = mask[rows].sum() / tokens  # the engine's token share
        part_lp = torch.tensor(lp[rows], dtype=torch.float64, requires_grad=True)
        part, _ = loss(part_lp, None, loss_batch(lp, old, adv, mask, expert, rows, units, share))
        (part * share).backward()
        total += float(part.detach()) * share
        grad[rows] = part_lp.grad
    assert total == pytest.approx(float(whole.detach()), rel=1e-12)
    assert torch.allclose(grad, whole_lp.grad, rtol=1e-10, atol=1e-14)


def test_mix_without_demonstrations_is_the_weighted_rl_loss() -> None:
    lp, old, adv, mask, _ = random_batch(3)
    expert = np.zeros(len(lp), dtype=bool)
    logprob = torch.tensor(lp, dtype=torch.float64)
    batch = loss_batch(lp, old, adv, mask, expert, np.arange(len(lp)))
    got, _ = mix_loss("token-mean", 0.25)(logprob, None, dataclasses.replace(batch, expert=None))
    want = 0.75 * kind_mean(ppo_token_losses(lp, old, adv), mask, ~expert, "token-mean")
    assert float(got) == pytest.approx(want, rel=1e-12)


def test_mix_presets_its_parts_and_refuses_a_bad_mu_name() -> None:
    spec = resolve_algorithm({"algorithm_type": "mix", "repeat_times": 2})
    assert (spec.advantage_fn, spec.policy_loss_fn, spec.sample_strategy) == ("grpo", "mix", "mix")
    assert spec.policy_loss_fn_args["mu"] == 0.1
    from rft.errors import ConfigError

    with pytest.raises(ConfigError, match="policy_loss_fn_args.nu: not an argument"):
        resolve_algorithm({"algorithm_type": "mix", "policy_loss_fn_args": {"nu": 0.2}})


def test_the_engine_applies_mix_across_its_micro_batches() -> None:
    """Through the real engine (float64 tiny model, micro-batches of 2, on-policy so each PPO
    token costs -A): the step's loss is (1 - μ) mean(-A) over learner tokens + μ mean(-log p)
    over demonstration tokens."""
    model, tok = load_model(ModelSpec("tiny", dtype="float64"))
    mu = 0.4
    spec = resolve_algorithm(
        {"algorithm_type": "mix", "kl_loss_fn": "none", "policy_loss_fn_args": {"mu": mu}}
    )
    engine = TorchTrainerEngine(model, TorchTrainerConfig(micro_batch_size=2), tokenizer=tok)
    layout = [
        ("a", 2, 0.0, False),
        ("x", 1, 0.0, True),
        ("a", 2, 1.0, False),
        ("b", 2, 1.0, False),
        ("y", 1, 0.0, True),
        ("b", 2, 0.0, False),
    ]
    rows, own = on_policy_rows(model, layout)
    values = StepTrainer(spec, build_loss(spec), engine).train(
        SampledBatch(rows, 0, SamplerCounters()), 1
    )
    advantages = [-1.0, None, 1.0, 1.0, None, -1.0]  # GRPO over groups a and b
    learner = [
        (-a * len(lp), len(lp)) for a, lp in zip(advantages, own, strict=True) if a is not None
    ]
    experts = [(-lp.sum(), len(lp)) for a, lp in zip(advantages, own, strict=True) if a is None]
    want = (1 - mu) * sum(s for s, _ in learner) / sum(n for _, n in learner) + mu * sum(
        s for s, _ in experts
    ) / sum(n for _, n in experts)
    assert values["loss"] == pytest.approx(want, rel=1e-4)


def test_a_mix_config_needs_its_demonstrations(tmp_path) -> None:
    import yaml

    from rft.catalog import load_config
    from rft.errors import ConfigError
    from tests.unit.config_samples import MINIMAL

    raw = yaml.safe_load(MINIMAL)
    raw["algorithm"]["algorithm_type"] = "mix"
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="auxiliary_buffers.sft_dataset, which is not set"):
        load_config(path)
    demos = tmp_path / "demos.jsonl"
    demos.write_text('{"prompt": "1+1?", "response": "2"}\n')
    raw["buffer"]["trainer_input"] = {"auxiliary_buffers": {"sft_dataset": {"path": str(demos)}}}
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    assert cfg.algorithm.algorithm_type == "mix"
