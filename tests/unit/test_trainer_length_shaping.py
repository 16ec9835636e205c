"""The trainer hands response lengths and model.max_response_tokens to advantage shaping, so a
length-shaped algorithm (dapo's overlong penalty) trains instead of stopping at its first step."""

from __future__ import annotations

from pathlib import Path

import torch

from rft.catalog import load_config
from rft.consumers.trainer.trainer import Trainer
from rft.engines.models import load_model
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine, TrainBatch
from tests.unit.config_samples import MINIMAL
from tests.unit.test_trainer_kl_penalty import set_advantages


def test_dapo_penalises_overlong_responses_through_the_trainer(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL.replace("repeat_times: 2", "repeat_times: 2\n  algorithm_type: dapo"))
    cfg = load_config(path, ["model.max_response_tokens=8"])
    trainer = Trainer(cfg)
    model, _ = load_model("tiny")
    engine = TorchTrainerEngine(model, TorchTrainerConfig())
    # one group of two equal rewards: only the length penalty can tell them apart
    batch = TrainBatch(
        prompt_ids=[[1, 2], [1, 2]],
        response_ids=[[3, 4], list(range(3, 11))],  # 2 tokens, and the full 8
        old_logprobs=[[0.0] * 2, [0.0] * 8],
        action_mask=[[1] * 2, [1] * 8],
    )
    rewards = torch.tensor([1.0, 1.0])
    set_advantages(trainer, batch, rewards, torch.tensor([0, 0]), engine)
    short, long = (float(torch.as_tensor(a).reshape(-1)[0]) for a in batch.advantages)
    assert short > long  # the response at the length limit lost reward to the penalty
