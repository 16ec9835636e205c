"""LR schedules selected by `trainer.optim.warmup_style`: the linear decay, and the optimizer
following it through real train steps."""

from __future__ import annotations

import pytest
import torch

from rft.algorithms.objective import LossBatch
from rft.engines.models import load_model
from rft.engines.trainer import (
    LR_SCHEDULES,
    TorchTrainerConfig,
    TorchTrainerEngine,
    TrainBatch,
)


def _reference_linear(step: int, warmup: int, total: int, floor: float) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1.0 - floor) * (1.0 - progress)


@pytest.mark.parametrize(("warmup", "total", "floor"), [(0, 5, 0.0), (2, 6, 0.1), (3, 7, 0.5)])
def test_linear_schedule_matches_its_formula(warmup: int, total: int, floor: float) -> None:
    config = TorchTrainerConfig(
        warmup_steps=warmup, total_steps=total, lr_schedule="linear", min_lr_ratio=floor
    )
    schedule = LR_SCHEDULES.get("linear")
    got = [schedule(s, config) for s in range(total + 2)]
    want = [_reference_linear(s, warmup, total, floor) for s in range(total + 2)]
    assert got == pytest.approx(want, abs=1e-12)
    assert got[total] == pytest.approx(floor) and got[-1] == pytest.approx(floor)
    # it differs from the other schedules, so selecting it changes what the optimizer does
    cosine = LR_SCHEDULES.get("cosine")
    assert any(abs(cosine(s, config) - got[s]) > 1e-3 for s in range(warmup, total))


def test_optimizer_follows_the_linear_schedule() -> None:
    model, _ = load_model("tiny")
    config = TorchTrainerConfig(lr=1.0, total_steps=4, lr_schedule="linear", min_lr_ratio=0.0)
    engine = TorchTrainerEngine(model, config)
    batch = TrainBatch(
        prompt_ids=[[1, 2, 3]],
        response_ids=[[4, 5]],
        old_logprobs=[[0.0, 0.0]],
        action_mask=[[1, 1]],
        advantages=torch.tensor([1.0]),
    )

    def loss(
        logprob: torch.Tensor, entropy: torch.Tensor | None, t: LossBatch
    ) -> tuple[torch.Tensor, dict]:
        return -(logprob * t.action_mask).sum() / t.action_mask.sum(), {}

    lrs = [engine.train_step(batch, loss)["lr"] for _ in range(4)]
    assert lrs == pytest.approx([1.0, 0.75, 0.5, 0.25])
