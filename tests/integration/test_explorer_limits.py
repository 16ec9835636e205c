"""The explorer's limits on the real Kafka: a task whose reward fn keeps raising and one whose
prompt is too long are parked in dead-letter, in the transaction that commits the step's
experiences and task offsets, with their reasons; the other tasks' experiences are written, the
step's metrics count it all, and explorer.env_vars were set before the engine was built."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.explorer.explorer import Explorer
from rft.consumers.run_plan import RunPlan
from rft.events.codec import EventCodec
from rft.events.models import DeadLetter, Experience, Metric, Task
from rft.events.reader import EventReader
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.producers.task_publisher import TaskPublisher, load_run_tasksets, publish_tasksets
from rft.rewards import REWARD_FUNCTIONS
from tests.integration.test_rft_loop import read_all

pytestmark = pytest.mark.integration


def limits_reward(response_text: str, payload: dict[str, Any], **args: Any) -> tuple[float, dict]:
    if payload.get("explode"):
        raise ValueError(f"cannot score {payload['question']!r}")
    return float(str(payload["answer"]) in response_text), {}


REWARD_FUNCTIONS.add("limits_it_reward", limits_reward, replace=True)

ROWS = [
    {"question": "What is 1 + 1?", "answer": 2},
    {"question": "What is 2 + 2?", "answer": 4},
    {"question": "What is 3 + 1?", "answer": 4, "explode": True},
    {"question": "What is 5 + 1?", "answer": 6},
    {"question": "Sum these: " + " + ".join(["1"] * 40) + "?", "answer": 40},  # > 64 tokens
]


def test_failed_and_refused_tasks_are_dead_lettered_in_the_step(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    raw = {
        "project": "rft-it",
        "name": unique,
        "mode": "explore",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {
            "model_path": "tiny",
            "max_prompt_tokens": 64,
            "max_response_tokens": 8,
            "enable_prompt_truncation": False,
            "repetition_penalty": 1.2,
            "min_response_tokens": 2,
        },
        "buffer": {
            "batch_size": len(ROWS),
            "total_steps": 1,
            "explorer_input": {
                "default_workflow_type": "simple_workflow",
                "default_reward_fn_type": "limits_it_reward",
                "taskset": {
                    "name": "limits",
                    "path": str(data),
                    "format": {"prompt_key": "question", "response_key": "answer"},
                },
            },
        },
        "explorer": {
            "eval_on_startup": False,
            "runner_per_model": 2,
            "max_retry_times": 1,
            "max_timeout": 300,
            "env_vars": {"RFT_NUM_THREADS": "1"},
        },
        "synchronizer": {"sync_style": "trainer_driven"},  # the explorer never waits for weights
        "stack": {
            "kafka": {"bootstrap_servers": stack.kafka.bootstrap_servers},
            "object_store": {"endpoint": stack.object_store.endpoint, "bucket": "rft-it"},
        },
    }
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    cfg = load_config(config_path)
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, plan.topics)
    with EventWriter.open(cfg.stack.kafka) as writer:
        publish_tasksets(
            TaskPublisher(writer), load_run_tasksets(cfg), plan.topics, epochs=1, seed=0
        )

    threads = torch.get_num_threads()
    try:
        summary = Explorer(cfg, idle_timeout_s=10).run()
        # the engine was built after env_vars set RFT_NUM_THREADS, which it reads
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)

    assert summary.steps == 1 and summary.experiences == 3 * 2
    assert summary.rejected_tasks == 2
    experiences = [
        e for e in read_all(cfg, plan.experience_topic, unique + "-e") if isinstance(e, Experience)
    ]
    tasks = [e for e in read_all(cfg, plan.topics.tasks, unique + "-t") if isinstance(e, Task)]
    by_question = {t.payload["question"]: t for t in tasks}
    explored = [ROWS[i]["question"] for i in (0, 1, 3)]
    assert {e.task_id for e in experiences} == {by_question[q].task_id for q in explored}
    assert all(len(e.response_ids) >= 2 for e in experiences)  # min_response_tokens

    letters = [
        e
        for e in read_all(cfg, plan.topics.dead_letter, unique + "-d")
        if isinstance(e, DeadLetter)
    ]
    parked = {EventCodec.default().decode(d.payload).payload["question"]: d for d in letters}
    assert set(parked) == {ROWS[2]["question"], ROWS[4]["question"]}
    failed, refused = parked[ROWS[2]["question"]], parked[ROWS[4]["question"]]
    assert failed.error_class.endswith("WorkflowFailedError")
    assert "gave up after 2 attempt(s)" in failed.error_message
    assert "ValueError: cannot score" in failed.error_message
    assert refused.error_class.endswith("PromptTooLongError")
    assert "over model.max_prompt_tokens (64)" in refused.error_message
    for letter in letters:
        assert letter.source_topic == plan.topics.tasks
        assert letter.consumer == plan.explorer_group

    # every task's offset committed with the step, parked ones included
    with EventReader.open(cfg.stack.kafka, plan.explorer_group, [plan.topics.tasks]) as reader:
        assert sum(o.offset for o in reader.committed()) == len(ROWS)

    metrics = [
        m
        for m in read_all(cfg, plan.topics.metrics, unique + "-m")
        if isinstance(m, Metric) and m.component == "explorer" and "retries" in m.values
    ]
    (step,) = metrics
    assert step.values["retries"] == 1 and step.values["failed_tasks"] == 1
    assert step.values["refused_prompts"] == 1 and step.values["rejected_tasks"] == 2
    assert step.values["timeouts"] == 0 and step.values["truncated_prompts"] == 0
