"""The trainer's reward KL penalty: rewards lose kl_coef × Σ_t mask · KL_t(rollout ‖ reference)
before group normalisation; checked against a float64 computation that scores each sequence on
its own (no padding) with the reference model, at the temperature the sequence was sampled at."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rft.algorithms.objective import Advantages
from rft.catalog import load_config
from rft.consumers.trainer.trainer import Trainer
from rft.engines.logprobs import token_logprobs
from rft.engines.models import ModelSpec, load_model
from rft.engines.trainer import (
    RowRewards,
    TorchTrainerConfig,
    TorchTrainerEngine,
    TrainBatch,
    fill_advantages,
)
from tests.unit.config_samples import MINIMAL

COEF = 0.5


def trainer(tmp_path: Path, *overrides: str) -> Trainer:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    return Trainer(load_config(path, list(overrides)))


def set_advantages(t: Trainer, batch: TrainBatch, rewards, groups, engine) -> dict[str, float]:
    """The advantages the trainer's algorithm gives `batch` in its engine step."""
    lengths = torch.tensor([float(len(r)) for r in batch.response_ids])
    batch.rewards = RowRewards(rewards, groups, lengths)
    advantages = Advantages(t.spec, t.cfg.model.max_response_tokens)
    return fill_advantages(batch, advantages, engine.reference_logprobs)


def random_batch(rows: int, seed: int, temperatures: list[float] | None = None) -> TrainBatch:
    rng = np.random.default_rng(seed)
    responses = [rng.integers(3, 250, rng.integers(2, 9)) for _ in range(rows)]
    masks = []
    for r in responses:
        m = (rng.random(len(r)) > 0.2).astype(np.int8)
        m[-1] = 1
        masks.append(m)
    return TrainBatch(
        prompt_ids=[rng.integers(3, 250, rng.integers(2, 7)) for _ in range(rows)],
        response_ids=responses,
        old_logprobs=[(-rng.random(len(r)) * 4).astype(np.float32) for r in responses],
        action_mask=masks,
        temperatures=temperatures,
    )


def expected_advantages(engine, batch, rewards, groups) -> list[np.ndarray]:
    penalised = []
    for i in range(len(batch)):
        prompt, response = list(batch.prompt_ids[i]), list(batch.response_ids[i])
        ids = torch.tensor([prompt + response])
        temperature = 1.0 if batch.temperatures is None else batch.temperatures[i]
        with torch.no_grad():
            ref, _ = token_logprobs(
                engine.ref_model, ids, temperature=temperature, start=len(prompt) - 1
            )
        kl = np.asarray(batch.old_logprobs[i], np.float64) - ref[0].double().numpy()  # k1
        penalised.append(rewards[i] - COEF * float((kl * batch.action_mask[i]).sum()))
    penalised = np.array(penalised)
    out = []
    for i in range(len(batch)):
        group = penalised[groups == groups[i]]
        a = (penalised[i] - group.mean()) / (group.std() + 1e-6)  # population std
        out.append(a * np.asarray(batch.action_mask[i], np.float64))
    return out


@pytest.mark.parametrize(
    ("seed", "temperatures"), [(0, None), (1, [0.7, 1.3] * 4), (2, [1.3] * 4 + [0.7] * 4)]
)
def test_kl_penalty_lowers_rewards_before_grpo_normalisation(
    tmp_path: Path, seed: int, temperatures: list[float] | None
) -> None:
    t = trainer(
        tmp_path,
        "algorithm.kl_loss_fn=none",  # the penalty alone: the reference serves only the rewards
        "algorithm.kl_penalty_fn=k1",
        f"algorithm.kl_penalty_fn_args={{kl_coef: {COEF}}}",
    )
    assert t.spec.uses_kl_penalty and not t.loss.needs_reference
    model, tok = load_model("tiny")
    engine = TorchTrainerEngine(
        model,
        TorchTrainerConfig(micro_batch_size=3, use_ref_model=True, ref_in_loss=False),
        tokenizer=tok,
    )
    batch = random_batch(8, seed, temperatures)
    rng = np.random.default_rng(seed + 100)
    rewards = rng.integers(0, 2, 8).astype(np.float64)
    groups = np.repeat(np.arange(2), 4)
    metrics = set_advantages(
        t, batch, torch.tensor(rewards, dtype=torch.float32), torch.tensor(groups), engine
    )
    assert "adv/kl_penalty_seq_mean" in metrics
    want = expected_advantages(engine, batch, rewards, groups)
    assert batch.advantages.shape == (8, max(len(r) for r in batch.response_ids))
    for got, expect in zip(batch.advantages, want, strict=True):
        np.testing.assert_allclose(got[: len(expect)], expect, rtol=1e-4, atol=1e-4)
        assert not got[len(expect) :].any()  # padding past the response


def test_on_policy_rollouts_at_any_temperature_pay_no_penalty(tmp_path: Path) -> None:
    """Rollouts of the reference's own weights have KL 0 when the reference is scored at each
    row's sampling temperature, so the penalised advantages equal the unpenalised ones."""
    penalised = trainer(
        tmp_path,
        "algorithm.kl_loss_fn=none",
        "algorithm.kl_penalty_fn=k1",
        f"algorithm.kl_penalty_fn_args={{kl_coef: {COEF}}}",
    )
    plain = trainer(tmp_path)
    model, tok = load_model(ModelSpec("tiny", dtype="float64"))
    engine = TorchTrainerEngine(
        model, TorchTrainerConfig(use_ref_model=True, ref_in_loss=False), tokenizer=tok
    )
    temps = [0.7, 1.3, 1.3, 0.7]
    batch = random_batch(4, 5, temps)
    for i, t in enumerate(temps):
        ids = torch.tensor([list(batch.prompt_ids[i]) + list(batch.response_ids[i])])
        with torch.no_grad():
            lp, _ = token_logprobs(model, ids, temperature=t, start=len(batch.prompt_ids[i]) - 1)
        batch.old_logprobs[i] = lp[0].numpy()
    rewards, groups = torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([0, 0, 1, 1])
    metrics = set_advantages(penalised, batch, rewards, groups, engine)
    assert abs(metrics["adv/kl_penalty_seq_mean"]) < 1e-5
    got = [np.asarray(a) for a in batch.advantages]
    set_advantages(plain, batch, rewards, groups, engine)
    for i, g in enumerate(got):
        want = batch.advantages[i].numpy() * np.asarray(batch.action_mask[i], np.float64)
        np.testing.assert_allclose(g[: len(want)], want, atol=1e-4)
    # the same rollouts against a reference at 1.0 would be penalised for the temperature alone
    batch.temperatures = None
    assert (
        abs(set_advantages(penalised, batch, rewards, groups, engine)["adv/kl_penalty_seq_mean"])
        > 1e-2
    )


def test_without_penalty_advantages_are_one_float_per_sequence(tmp_path: Path) -> None:
    t = trainer(tmp_path)
    model, _ = load_model("tiny")
    engine = TorchTrainerEngine(model, TorchTrainerConfig())
    batch = random_batch(4, 3)
    set_advantages(t, batch, torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]), engine)
    assert batch.advantages.shape == (4, 1)
    assert float(batch.advantages[0, 0]) == pytest.approx(1.0, abs=1e-5)
    assert float(batch.advantages[1, 0]) == pytest.approx(-1.0, abs=1e-5)
    assert batch.advantages[2:, 0].tolist() == [0.0, 0.0]


def test_demonstration_rows_longer_than_every_rollout_keep_the_batch_width(
    tmp_path: Path,
) -> None:
    """A mixed batch whose demonstration rows are longer than every rollout: the token
    advantages span the batch's widest response (what the loss's logprobs span), demonstrations
    keep 0, and the rollouts' equal those of the rollouts scored alone."""
    t = trainer(
        tmp_path,
        "algorithm.kl_loss_fn=none",
        "algorithm.kl_penalty_fn=k1",
        f"algorithm.kl_penalty_fn_args={{kl_coef: {COEF}}}",
    )
    model, tok = load_model("tiny")
    engine = TorchTrainerEngine(
        model,
        TorchTrainerConfig(micro_batch_size=3, use_ref_model=True, ref_in_loss=False),
        tokenizer=tok,
    )
    rollouts = random_batch(4, 7)
    demos = random_batch(2, 8)
    demos.response_ids = [np.arange(3, 3 + 14) for _ in range(2)]  # past any rollout's 8
    demos.old_logprobs = [np.full(14, -1.0, dtype=np.float32) for _ in range(2)]
    demos.action_mask = [np.ones(14, dtype=np.int8) for _ in range(2)]
    mixed = TrainBatch(
        prompt_ids=rollouts.prompt_ids + demos.prompt_ids,
        response_ids=rollouts.response_ids + demos.response_ids,
        old_logprobs=rollouts.old_logprobs + demos.old_logprobs,
        action_mask=rollouts.action_mask + demos.action_mask,
        expert=torch.tensor([False] * 4 + [True] * 2),
    )
    rewards, groups = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1, 2, 3])
    set_advantages(t, mixed, rewards, groups, engine)
    assert mixed.advantages.shape == (6, 14)
    assert not mixed.advantages[4:].any()
    set_advantages(t, rollouts, rewards[:4], groups[:4], engine)
    width = rollouts.advantages.shape[1]
    torch.testing.assert_close(mixed.advantages[:4, :width], rollouts.advantages)
    assert not mixed.advantages[:4, width:].any()
