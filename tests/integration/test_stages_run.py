"""`stages: [sft, grpo]` end to end on the real Kafka and MinIO with the tiny model: `rft run` runs
the SFT stage (mode train, its dataset published to its own run's topic), records its last
version in the object store, and runs the GRPO stage (mode both) from that version: the explorers
of the GRPO stage sample with stage 1's last weights (their logprobs recomputed under those
weights match, under the base model's they do not). `rft status` names the stages, the finished
one with its last version. A second `rft run` runs nothing again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from rft.catalog import load_pipeline
from rft.config.connections import StackSettings
from rft.consumers.run_plan import RunPlan
from rft.engines.models import load_model
from rft.engines.weights import load_weights_into, tensors_of_files
from rft.events.models import Experience
from rft.storage.checkpoint_manifest import MANIFEST_NAME
from rft.storage.stage_progress import StageProgress
from rft.supervisor.stage_pipeline import START_MODEL_DIR
from tests.integration.test_rft_loop import recomputed_logprobs, run_config
from tests.integration.test_sft_run import announced, published

pytestmark = pytest.mark.integration

ROWS, SFT_BATCH = 8, 4  # the SFT stage: 2 steps
GRPO_STEPS = 2
TEMPERATURE = 0.8


def staged_config(stack: StackSettings, name: str, tmp: Path, grpo_steps: int = GRPO_STEPS) -> Path:
    data = tmp / "demos.jsonl"
    with data.open("w") as out:
        for i in range(ROWS):
            chat = [
                {"role": "user", "content": f"What is {i} + 1?"},
                {"role": "assistant", "content": f"{i + 1}"},
            ]
            out.write(json.dumps({"messages": chat}) + "\n")
    raw = run_config(stack, name, tmp)
    raw["model"]["max_response_tokens"] = 8
    raw["buffer"]["total_steps"] = grpo_steps
    raw["trainer"]["save_interval"] = 1
    raw |= {
        "stages": [
            {
                "stage_name": "sft",
                "mode": "train",
                "algorithm": {"algorithm_type": "sft"},
                "buffer": {
                    "train_batch_size": SFT_BATCH,
                    "total_steps": ROWS // SFT_BATCH,
                    "trainer_input": {
                        "experience_buffer": {
                            "name": "demos",
                            "storage_type": "file",
                            "path": str(data),
                            "format": {"prompt_type": "messages", "messages_key": "messages"},
                        }
                    },
                },
                # a large lr so stage 1's last version is far from the base model
                "trainer": {"optim": {"lr": 5.0e-2}},
            },
            {"stage_name": "grpo"},
        ],
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def rft(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rft.cli.main", *argv], capture_output=True, text=True, timeout=600
    )


def stage_plans(config: Path) -> tuple[RunPlan, RunPlan]:
    (_, sft), (_, grpo) = load_pipeline(config)
    return RunPlan(sft), RunPlan(grpo)


def progress_of(plan: RunPlan, base_name: str) -> StageProgress:
    return StageProgress(plan.checkpoint_store().store, plan.cfg.project, base_name)


def test_a_grpo_stage_starts_from_the_sft_stages_last_version(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    name = f"{unique}-stages"
    config = staged_config(stack, name, tmp_path)
    sft, grpo = stage_plans(config)
    assert (sft.cfg.name, grpo.cfg.name) == (f"{name}-sft", f"{name}-grpo")

    done = rft("run", "--config", str(config))
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    sft_last = ROWS // SFT_BATCH
    assert f"stage 1/2 'sft': finished: last version v{sft_last}" in out
    assert f"stage 2/2 'grpo': starts from run rft-it.{name}-sft v{sft_last}" in out
    assert f"stage 2/2 'grpo': finished: last version v{GRPO_STEPS}" in out

    # each stage is its own run: its own dataset / task topics, its own checkpoints
    assert len(published(stack, sft.experience_topic)) == ROWS
    assert sft.checkpoint_store().list_versions() == list(range(1, sft_last + 1))
    assert grpo.checkpoint_store().list_versions() == list(range(1, GRPO_STEPS + 1))
    assert [v.version for v in announced(stack, grpo.topics.weights)] == [1, 2]

    # the record names stage 1's last version, and the start model is exactly it
    progress = progress_of(sft, name)
    record = progress.finished(0, "sft")
    assert record is not None and record.last_version == sft_last
    assert record.run_name == f"{name}-sft"
    last = progress.finished(1, "grpo")
    assert last is not None and last.last_version == GRPO_STEPS
    start = grpo.cfg.job_dir / START_MODEL_DIR / f"{name}-sft-v{sft_last:06d}"
    manifest, files = sft.checkpoint_store().read_files(sft_last)
    assert (start / MANIFEST_NAME).read_bytes() == manifest.to_json()
    for entry in manifest.files:
        if not entry.name.startswith("trainer_state/"):
            assert (start / entry.name).read_bytes() == bytes(files[entry.name])

    # the GRPO stage's explorers sampled with stage 1's last weights as their version 0
    stage1 = tensors_of_files(files, "stage 1")
    base_model, _ = load_model(sft.model_spec())
    start_model, _ = load_model(sft.model_spec())
    load_weights_into(start_model, dict(stage1))
    first = [
        e
        for e in published(stack, grpo.experience_topic).values()
        if isinstance(e, Experience) and e.model_version == 0
    ]
    assert first, "no experience of the GRPO stage's version 0"
    exp = first[0]
    said = torch.as_tensor(exp.logprobs.copy())
    mine = recomputed_logprobs(start_model, exp, TEMPERATURE)
    base = recomputed_logprobs(base_model, exp, TEMPERATURE)
    assert torch.allclose(said, mine, atol=1e-3), (said, mine)
    assert not torch.allclose(said, base, atol=1e-2)

    # rft status: the stages, the finished ones with their last version
    status = rft("status", "--config", str(config))
    assert status.returncode == 0, status.stderr[-2000:]
    assert (
        f"stage 1 'sft' (run rft-it.{name}-sft, mode train): finished, last version v{sft_last}"
        in status.stdout
    )
    assert (
        f"stage 2 'grpo' (run rft-it.{name}-grpo, mode both): finished, last version v{GRPO_STEPS}"
        in status.stdout
    )
    assert "every stage finished" in status.stdout
    one = rft("status", "--config", str(config), "--stage", "grpo")
    assert one.returncode == 0 and f"{name}-grpo" in one.stdout and "pipeline" not in one.stdout

    # a second run runs nothing again
    again = rft("run", "--config", str(config))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "stage 1/2 'sft': finished earlier" in again.stdout
    assert "stage 2/2 'grpo': finished earlier" in again.stdout
    assert sft.checkpoint_store().list_versions() == list(range(1, sft_last + 1))
    assert len(published(stack, sft.experience_topic)) == ROWS


def test_a_bad_stage_stops_the_run_before_anything_starts(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config = staged_config(stack, f"{unique}-bad", tmp_path)
    sft, _ = stage_plans(config)
    raw = yaml.safe_load(config.read_text())
    raw["stages"][1]["algorithm"] = {"algorithm_type": "no_such_algorithm"}
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    done = rft("run", "--config", str(config))
    assert done.returncode != 0
    assert "`stages[1].algorithm.algorithm_type`" in done.stderr
    assert sft.checkpoint_store().list_versions() == []  # stage 1 never ran
