"""The loss of a batch mixing rollouts with demonstrations (`sample_strategy: mix`): float64
references of L = (U_rl L_rl + U_sft L_sft) / (U_rl + U_sft), written as per-token / per-row sums,
micro-batches adding up to the whole batch, and the trainer engine applying it row by row."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.algorithms.expert_rows import expert_row_loss
from rft.algorithms.objective import build_loss
from rft.algorithms.policy_losses import POLICY_LOSS_FN
from rft.algorithms.presets import resolve_algorithm
from rft.buffer.sampler import BatchRow, SampledBatch, SamplerCounters
from rft.consumers.trainer.train_step import StepTrainer, train_batch_of
from rft.engines.logprobs import token_logprobs
from rft.engines.models import ModelSpec, load_model
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine
from tests.unit.experience_log import experience

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]


def ppo_token_losses(lp: np.ndarray, old: np.ndarray, adv: np.ndarray, eps: float = 0.2):
    ratio = np.exp(np.clip(lp - old, -20, 20))
    return np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - eps, 1 + eps))


def reference(lp, old, adv, mask, expert, mode) -> float:
    """Each row's own loss (PPO on learner rows, -log p on expert rows), averaged by `mode`."""
    per_token = np.where(expert[:, None], -lp, ppo_token_losses(lp, old, adv))
    if mode == "token-mean":
        n = mask.sum()
        return math.fsum((per_token * mask).ravel()) / n if n else 0.0
    rows = []
    for b in range(lp.shape[0]):
        n = mask[b].sum()
        if n:
            s = math.fsum(per_token[b][mask[b] > 0])
            rows.append(s / n if mode == "seq-mean-token-mean" else s)
    return math.fsum(rows) / len(rows) if rows else 0.0


@st.composite
def mixed_batches(draw: st.DrawFn):
    b, t = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    lp = -rng.exponential(1.0, (b, t))
    old = lp + rng.normal(0, 0.3, (b, t))
    adv = rng.normal(0, 1, (b, t))
    mask = (rng.random((b, t)) < 0.8).astype(np.float64)
    expert = rng.random(b) < draw(st.sampled_from([0.0, 0.4, 1.0]))
    return lp, old, adv, mask, expert


def ppo_rows(lp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mode: str):
    return lambda m: POLICY_LOSS_FN.get("ppo")(lp, old, adv, m, mode)


@settings(max_examples=200, deadline=None)
@given(mixed_batches(), st.sampled_from(MODES))
def test_matches_float64_reference(batch, mode: str) -> None:
    lp, old, adv, mask, expert = batch
    t = [torch.tensor(a, dtype=torch.float64) for a in (lp, old, adv, mask)]
    loss, metrics = expert_row_loss(
        ppo_rows(t[0], t[1], t[2], mode), t[0], t[3], torch.tensor(expert), mode
    )
    assert loss.dtype == torch.float64
    assert float(loss) == pytest.approx(reference(lp, old, adv, mask, expert, mode), abs=1e-12)


def test_gradient_on_demonstration_tokens_is_minus_one_over_the_tokens() -> None:
    rng = np.random.default_rng(4)
    lp_np = -rng.exponential(1.0, (4, 5))
    mask = np.ones((4, 5))
    lp = torch.tensor(lp_np, requires_grad=True)
    expert = torch.tensor([False, True, False, True])
    zeros = torch.zeros(4, 5, dtype=torch.float64)
    loss, _ = expert_row_loss(
        ppo_rows(lp, lp.detach(), zeros, "token-mean"), lp, torch.tensor(mask), expert
    )
    loss.backward()
    assert lp.grad is not None
    np.testing.assert_allclose(lp.grad[1].numpy(), -1 / 20)  # 20 tokens in the batch
    np.testing.assert_allclose(lp.grad[0].numpy(), 0.0)  # zero advantage: no RL gradient


def test_token_share_weighted_micro_batches_add_up_to_the_batch() -> None:
    rng = np.random.default_rng(7)
    lp, old, adv = (
        -rng.exponential(1, (6, 4)),
        -rng.exponential(1, (6, 4)),
        rng.normal(0, 1, (6, 4)),
    )
    mask = (rng.random((6, 4)) < 0.7).astype(np.float64)
    mask[:, 0] = 1
    expert = np.array([True, False, False, True, True, False])
    t = [torch.tensor(a) for a in (lp, old, adv, mask)]
    whole, _ = expert_row_loss(
        ppo_rows(t[0], t[1], t[2], "token-mean"), t[0], t[3], torch.tensor(expert)
    )
    total = 0.0
    for rows in ([0, 1], [2, 3, 4], [5]):  # the engine weights each by its share of the tokens
        sub = [x[rows] for x in t]
        part, _ = expert_row_loss(
            ppo_rows(sub[0], sub[1], sub[2], "token-mean"),
            sub[0],
            sub[3],
            torch.tensor(expert[rows]),
        )
        total += float(part) * mask[rows].sum() / mask.sum()
    assert total == pytest.approx(float(whole), abs=1e-12)


def test_the_engine_trains_demonstrations_with_the_sft_loss() -> None:
    """Through the real engine (float64 tiny model, micro-batches of 2): the step's loss is the
    reference over the model's own logprobs, and demonstrations get zero advantage."""
    model, tok = load_model(ModelSpec("tiny", dtype="float64"))
    spec = resolve_algorithm({"algorithm_type": "grpo", "kl_loss_fn": "none"})
    engine = TorchTrainerEngine(model, TorchTrainerConfig(micro_batch_size=2), tokenizer=tok)
    # learner groups a (rewards 0, 1) and b (1, 0), and one demonstration in the middle
    layout = [
        ("a", 2, 0.0, False),
        ("a", 2, 1.0, False),
        ("x", 1, 0.0, True),
        ("b", 2, 1.0, False),
        ("b", 2, 0.0, False),
    ]
    rows, own_logprobs = on_policy_rows(model, layout)
    batch = SampledBatch(rows, 0, SamplerCounters())
    assert train_batch_of(rows).expert.tolist() == [False, False, True, False, False]
    values = StepTrainer(spec, build_loss(spec), engine).train(batch, 1)
    # GRPO advantages are -1, +1 in a and +1, -1 in b; on-policy the PPO token loss is -A, and
    # the demonstration's tokens cost -log p; the mean runs over every token of the batch
    advantages = [-1.0, 1.0, None, 1.0, -1.0]
    total = sum(
        -lp.sum() if a is None else -a * len(lp)
        for a, lp in zip(advantages, own_logprobs, strict=True)
    )
    n = sum(len(lp) for lp in own_logprobs)
    assert values["loss"] == pytest.approx(total / n, rel=1e-4)
    assert values["sft_loss"] > 0 and "adv/" in " ".join(values)


def on_policy_rows(
    model, layout: list[tuple[str, int, float, bool]]
) -> tuple[list[BatchRow], list[np.ndarray]]:
    """Batch rows of (group, group size, reward, expert) with random tokens, each carrying the
    model's own logprobs (on-policy: ratio 1), and those logprobs in float64."""
    rng = np.random.default_rng(0)
    rows, own = [], []
    for i, (group, size, reward, expert) in enumerate(layout):
        prompt = rng.integers(3, 250, 3).astype(np.int32)
        response = rng.integers(3, 250, 2 + i).astype(np.int32)
        with torch.no_grad():
            lp, _ = token_logprobs(
                model, torch.tensor([[*prompt, *response]]), start=len(prompt) - 1
            )
        own.append(lp[0].double().numpy())
        exp = dataclasses.replace(
            experience(group, size, i, 0, reward),
            prompt_ids=prompt,
            response_ids=response,
            logprobs=lp[0].numpy().astype(np.float32),  # on-policy: ratio 1
            action_mask=None,
        )
        rows.append(BatchRow(exp, None, 1, expert))
    return rows, own
