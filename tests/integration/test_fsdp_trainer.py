"""`rft train` with a Trinity-style `trainer_type: verl` / `trainer_strategy: fsdp` and
`trainer.world_size: 2`: the FSDP2 engine over two gloo ranks (the second a local process of its
own) trains from the real Kafka topic, publishes consolidated versions to MinIO once, and a second
`rft train` resumes from the first one's newest version (its training state and manifest offsets)
and trains exactly the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rft.config.connections import StackSettings
from rft.engines.models import load_model
from rft.engines.weights import load_weights_into, read_safetensors_dir
from rft.storage.checkpoint_store import TRAINER_STATE_DIR
from tests.integration.test_rft_loop import STEPS, published_run
from tests.integration.test_trainer_resume import run_verb

pytestmark = pytest.mark.integration

FSDP = ("trainer.trainer_type=verl", "trainer.trainer_strategy=fsdp", "trainer.world_size=2")


def test_two_rank_trainer_trains_publishes_and_resumes(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config_path, cfg, plan = published_run(stack, unique, tmp_path, "trainer_driven", 1)
    run_verb("explore", config_path)
    per_step = cfg.buffer.batch_size * cfg.algorithm.repeat_times

    first = run_verb("train", config_path, *FSDP, f"trainer.total_steps={STEPS // 2}")
    second = run_verb("train", config_path, *FSDP, f"trainer.total_steps={STEPS}")
    for _, err in (first, second):
        assert "is read as `fsdp2`: rft has no veRL workers" in err
        assert "fsdp2 trainer engine: 2 ranks on cpu, cpu" in err
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in (first, second)]
    assert summaries[0]["experiences"] == per_step * (STEPS // 2)
    assert summaries[1]["experiences"] == per_step * (STEPS - STEPS // 2)  # only the rest
    assert (
        f"resumed from checkpoint v{STEPS // 2} (train step {STEPS // 2}, weights and optimizer"
        in second[1]
    )

    store = plan.checkpoint_store()
    assert store.list_versions() == list(range(1, STEPS + 1))
    final = store.read_manifest(STEPS)
    assert any(f.name.startswith(TRAINER_STATE_DIR) for f in final.files)
    # one consolidated HF directory per version: every tensor of the model, once
    path = store.download(STEPS, tmp_path / "final", skip_prefixes=(TRAINER_STATE_DIR,))
    model, _ = load_model("tiny")
    base = {k: v.clone() for k, v in model.state_dict().items()}
    load_weights_into(model, read_safetensors_dir(path))
    assert any(not torch.equal(base[k], v) for k, v in model.state_dict().items())
