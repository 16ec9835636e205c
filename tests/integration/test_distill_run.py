"""On-policy distillation on the real stack: the explorer rolls out the student (tiny, seed 0), the
trainer loads the teacher (another tiny model, saved to a directory: same tokenizer, other
weights) from `explorer.auxiliary_models[0].model_path`, scores the student's samples with it and
trains on the teacher-minus-student token advantages. It trains half the steps, resumes for the
rest, saves the teacher's weights hash with every version, and refuses to resume with another
teacher."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.run_plan import RunPlan
from rft.consumers.trainer.checkpoint import TrainerCheckpointer
from rft.engines.models import ModelSpec, load_model
from rft.engines.teacher import weights_sha256
from rft.engines.weights import read_safetensors_dir
from rft.events.models import Metric
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.producers.task_publisher import TaskPublisher, load_run_tasksets, publish_tasksets
from tests.integration.test_rft_loop import STEPS, read_all, run_config
from tests.integration.test_trainer_resume import run_verb

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # minutes of CPU training: make test-all


def saved_teacher(path: Path, seed: int) -> str:
    model, tokenizer = load_model(ModelSpec("tiny", seed=seed))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return weights_sha256(model)


def distill_config(stack: StackSettings, name: str, tmp: Path, teacher: Path) -> dict:
    raw = run_config(stack, name, tmp, "trainer_driven", 1)
    raw["algorithm"] = {"algorithm_type": "on_policy_distill", "repeat_times": 2}
    raw["explorer"]["auxiliary_models"] = [{"name": "teacher", "model_path": str(teacher)}]
    return raw


def test_on_policy_distill_trains_against_its_teacher_and_resumes(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    teacher_hash = saved_teacher(tmp_path / "teacher", seed=11)
    raw = distill_config(stack, unique, tmp_path, tmp_path / "teacher")
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    cfg = load_config(config_path)
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, plan.topics)
    with EventWriter.open(cfg.stack.kafka) as writer:
        publish_tasksets(
            TaskPublisher(writer), load_run_tasksets(cfg), plan.topics, epochs=1, seed=0
        )
    run_verb("explore", config_path)
    per_step = cfg.buffer.batch_size * cfg.algorithm.repeat_times

    first = run_verb("train", config_path, f"trainer.total_steps={STEPS // 2}")
    second = run_verb("train", config_path, f"trainer.total_steps={STEPS}")
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in (first, second)]
    assert summaries[0]["experiences"] == per_step * (STEPS // 2)
    assert summaries[1]["experiences"] == per_step * (STEPS - STEPS // 2)
    assert f"resumed from checkpoint v{STEPS // 2}" in second[1]
    for _, err in (first, second):
        assert f"teacher {tmp_path / 'teacher'} loaded (weights sha256 {teacher_hash})" in err

    # every version records the teacher it was trained against
    checkpoints = TrainerCheckpointer(plan.checkpoint_store(), save_interval=1)
    for version in (STEPS // 2, STEPS):
        state = checkpoints.read_sampler_state(version)
        assert state is not None
        assert state["teacher"] == {
            "where": "explorer.auxiliary_models[0]",
            "model_path": str(tmp_path / "teacher"),
            "weights_sha256": teacher_hash,
        }

    # each step's advantages came from the teacher: a KL estimate between two different random
    # models, never zero; and the student's weights moved
    steps = [
        m
        for m in read_all(cfg, plan.topics.metrics, unique + "-m")
        if isinstance(m, Metric) and m.component == "trainer" and "adv/kl_mean" in m.values
    ]
    assert len(steps) == STEPS
    assert all(abs(m.values["adv/kl_mean"]) > 1e-3 for m in steps)
    base = load_model(ModelSpec("tiny", seed=cfg.explorer.rollout_model.seed))[0].state_dict()
    last = read_safetensors_dir(plan.checkpoint_store().download(STEPS, tmp_path / "last"))
    assert any(
        not bool((last[name].float() - base[name].float()).abs().max() < 1e-6)
        for name in last
        if name in base
    )

    # a resume with another teacher is refused, naming the key
    other = copy.deepcopy(raw)
    saved_teacher(tmp_path / "other", seed=12)
    other["explorer"]["auxiliary_models"][0]["model_path"] = str(tmp_path / "other")
    other_path = tmp_path / "other.yaml"
    other_path.write_text(yaml.safe_dump(other))
    _, err = run_verb("train", other_path, f"trainer.total_steps={STEPS + 1}", code=1)
    assert (
        f"explorer.auxiliary_models[0].model_path: weight version {STEPS} was trained against "
        "the teacher" in err
    )
