"""A deterministic re-run on the real Kafka: an explorer's experiences, exported as JSONL, answer a
second explorer group whose rollout engine is `replay`; it writes the same responses, logprobs and
rewards for the same tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.config.schema import RftConfig
from rft.consumers.explorer.explorer import Explorer
from rft.consumers.replay.export import EXPORT_FORMATS
from rft.consumers.run_plan import RunPlan
from rft.events.models import Experience
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.producers.task_publisher import TaskPublisher, load_run_tasksets, publish_tasksets
from rft.replay.experience_rows import ExportRow
from tests.integration.test_rft_loop import read_all

pytestmark = pytest.mark.integration

ROWS = [{"question": f"What is {a} + {b}?", "answer": a + b} for a, b in ((1, 2), (3, 4), (5, 6))]


def explore(
    stack: StackSettings,
    tmp_path: Path,
    name: str,
    *,
    sections: dict[str, Any] | None = None,
    **rollout: Any,
) -> RftConfig:
    """One explore step of ROWS as run `name`, with `explorer.rollout_model` set to `rollout`
    and `sections` (dotted section -> keys) merged into the config."""
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    raw = {
        "project": "rft-it",
        "name": name,
        "mode": "explore",
        "checkpoint_root_dir": str(tmp_path / name),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {"model_path": "tiny", "max_prompt_tokens": 64, "max_response_tokens": 8},
        "buffer": {
            "batch_size": len(ROWS),
            "total_steps": 1,
            "explorer_input": {
                "default_workflow_type": "math_workflow",
                "taskset": {
                    "name": "sums",
                    "path": str(data),
                    "format": {"prompt_key": "question", "response_key": "answer"},
                },
            },
        },
        "explorer": {"eval_on_startup": False, "rollout_model": rollout},
        "synchronizer": {"sync_style": "trainer_driven"},  # the explorer never waits for weights
        "stack": {
            "kafka": {"bootstrap_servers": stack.kafka.bootstrap_servers},
            "object_store": {"endpoint": stack.object_store.endpoint, "bucket": "rft-it"},
        },
    }
    for dotted, keys in (sections or {}).items():
        section = raw
        for part in dotted.split("."):
            section = section.setdefault(part, {})
        section.update(keys)
    config_path = tmp_path / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    cfg = load_config(config_path)
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, plan.topics)
    with EventWriter.open(cfg.stack.kafka) as writer:
        publish_tasksets(
            TaskPublisher(writer), load_run_tasksets(cfg), plan.topics, epochs=1, seed=0
        )
    summary = Explorer(cfg, idle_timeout_s=10).run()
    assert summary.steps == 1 and summary.experiences == len(ROWS) * 2
    return cfg


def experiences(cfg: RftConfig, group: str) -> list[Experience]:
    topic = RunPlan(cfg).experience_topic
    return [e for e in read_all(cfg, topic, group) if isinstance(e, Experience)]


def answered(exps: list[Experience]) -> list[tuple[Any, ...]]:
    """What was answered to what, in an order that does not depend on the run."""
    return sorted(
        (
            tuple(e.prompt_ids.tolist()),
            tuple(e.response_ids.tolist()),
            tuple(e.logprobs.tolist()),
            e.response_text,
            e.reward,
            e.truncated,
        )
        for e in exps
    )


def test_a_replay_engine_explorer_writes_what_was_recorded(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    recorded_cfg = explore(stack, tmp_path, unique)
    recorded = experiences(recorded_cfg, unique + "-rec")
    recording = tmp_path / "recorded.jsonl"
    writer = EXPORT_FORMATS.get("jsonl")(str(recording), decoded=False, overwrite=True, table="x")
    writer.write([ExportRow(e, "recorded", 0, i, 0) for i, e in enumerate(recorded)])
    writer.close()

    name = unique + "-rerun"
    rerun_cfg = explore(
        stack, tmp_path, name, engine_type="replay", engine_args={"path": str(recording)}
    )
    rerun = experiences(rerun_cfg, name + "-read")
    # a run of its own (its own topics), answered as the recorded run was
    assert RunPlan(rerun_cfg).experience_topic != RunPlan(recorded_cfg).experience_topic
    assert len(rerun) == len(recorded) == len(ROWS) * 2
    assert answered(rerun) == answered(recorded)
