"""Publishing tasksets onto the real local Kafka and reading the Task events back."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rft.cli.main import main
from rft.config.connections import StackSettings
from rft.config.schema import TasksetConfig
from rft.events.models import Task
from rft.events.reader import Envelope, EventReader
from rft.events.topics import TopicNames, ensure_topics
from rft.events.writer import EventWriter
from rft.producers.task_publisher import (
    TaskPublisher,
    has_committed_tasks,
    publish_atomically,
    publish_tasksets,
)
from rft.producers.taskset_reader import load_taskset

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasksets"


def read_all(stack: StackSettings, topic: str, expected: int, group: str) -> list[Envelope]:
    """Poll `topic` from the beginning until `expected` events arrived (or 60 s passed)."""
    got: list[Envelope] = []
    deadline = time.monotonic() + 60
    with EventReader.open(stack.kafka, group, [topic]) as reader:
        while len(got) < expected and time.monotonic() < deadline:
            got.extend(reader.poll(max_events=500, timeout_s=1.0))
        got.extend(reader.poll(max_events=500, timeout_s=2.0))  # nothing more may follow
    return got


def test_publish_generator_epochs_and_eval_then_read_back(
    stack: StackSettings, unique: str
) -> None:
    topics = TopicNames.for_run("rft", unique)
    ensure_topics(stack.kafka, [topics.tasks, topics.eval_tasks])
    train = load_taskset(
        TasksetConfig(
            name="arith",
            path="arithmetic",
            storage_type="generator",
            generator_args={"num_tasks": 20, "seed": 5},
            repeat_times=4,
        )
    )
    evals = load_taskset(
        TasksetConfig(
            name="cd", path="countdown", storage_type="generator", generator_args={"num_tasks": 6}
        ),
        is_eval=True,
    )
    with EventWriter.open(stack.kafka) as writer:
        summary = publish_tasksets(TaskPublisher(writer), [train, evals], topics, epochs=2, seed=11)
    assert summary.counts == {"arith": {0: 20, 1: 20}, "cd": {0: 6}}

    envelopes = read_all(stack, topics.tasks, 40, f"{unique}-train")
    assert len(envelopes) == 40
    tasks = [e.event for e in envelopes]
    assert all(isinstance(t, Task) for t in tasks)
    assert {e.key for e in envelopes} == {t.task_id.encode() for t in tasks}
    assert len({t.task_id for t in tasks}) == 40
    by_index = {row.index: row.payload for row in train.rows}
    for task in tasks:
        assert task.payload == by_index[task.index]  # the raw row survives the wire exactly
        assert task.repeat_times == 4 and task.workflow == "math_workflow"
        assert task.format["prompt_key"] == "question"
    # one key keeps one partition, so per partition the order is the publish order
    for partition in {e.partition for e in envelopes}:
        offsets = [e.offset for e in envelopes if e.partition == partition]
        assert offsets == sorted(offsets)

    eval_envelopes = read_all(stack, topics.eval_tasks, 6, f"{unique}-eval")
    eval_tasks = [e.event for e in eval_envelopes]
    assert sorted(t.index for t in eval_tasks) == list(range(6))
    assert all(t.is_eval and t.epoch == 0 for t in eval_tasks)
    assert {t.workflow for t in eval_tasks} == {"countdown_workflow"}


def test_cli_publishes_jsonl_and_skips_only_bad_rows(
    stack: StackSettings, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RFT_KAFKA_BOOTSTRAP", stack.kafka.bootstrap_servers)
    path = EXAMPLES / "arithmetic_malformed.jsonl"
    argv = [
        "publish", str(path), "--project", "rft", "--name", unique,
        "--prompt-key", "question", "--response-key", "answer", "--epochs", "2",
    ]  # fmt: skip
    assert main(argv) == 1  # "fail": nothing is sent
    assert main([*argv, "--on-bad-rows", "skip-and-report"]) == 3

    topic = TopicNames.for_run("rft", unique).tasks
    tasks = [e.event for e in read_all(stack, topic, 6, f"{unique}-cli")]
    assert len(tasks) == 6  # 3 good rows x 2 epochs, and none from the refused first attempt
    assert sorted({t.payload["answer"] for t in tasks}) == [5, 9, 49]
    assert {t.task_id for t in tasks} == {
        f"arithmetic_malformed:{epoch}:{index}" for epoch in (0, 1) for index in (0, 4, 7)
    }


CRASHING_PUBLISHER = """
import os, sys
from rft.producers.task_publisher import TaskPublisher, publish_tasksets
from rft.producers.taskset_reader import load_taskset
from rft.config.connections import KafkaSettings
from rft.config.schema import TasksetConfig
from rft.events.topics import TopicNames
from rft.events.writer import EventWriter

bootstrap, run, tx_id = sys.argv[1:]
taskset = load_taskset(TasksetConfig(name="arith", path="arithmetic", storage_type="generator",
                                     generator_args={"num_tasks": 7, "seed": 1}))
writer = EventWriter.open(KafkaSettings(bootstrap_servers=bootstrap), transactional_id=tx_id)
writer.begin()
publish_tasksets(TaskPublisher(writer), [taskset], TopicNames.for_run("rft", run), epochs=1, seed=0)
writer.flush()
os._exit(9)  # dies inside its open transaction: no commit, no abort
"""


def test_a_publish_that_dies_part_way_leaves_nothing_and_a_rerun_publishes_all(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    topics = TopicNames.for_run("rft", unique)
    ensure_topics(stack.kafka, [topics.tasks, topics.eval_tasks])
    tx_id = f"rft.{unique}.publisher"
    script = tmp_path / "crash.py"
    script.write_text(CRASHING_PUBLISHER)
    done = subprocess.run(
        [sys.executable, str(script), stack.kafka.bootstrap_servers, unique, tx_id],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 9, done.stderr[-2000:]
    assert not has_committed_tasks(stack.kafka, topics.tasks)  # 7 tasks sent, none readable

    taskset = load_taskset(
        TasksetConfig(
            name="arith",
            path="arithmetic",
            storage_type="generator",
            generator_args={"num_tasks": 12, "seed": 2},
        )
    )
    # same transactional id: starting it fences the dead transaction and aborts it
    summary = publish_atomically(
        stack.kafka, [taskset], topics, epochs=1, seed=0, transactional_id=tx_id
    )
    assert summary.total == 12
    assert has_committed_tasks(stack.kafka, topics.tasks)
    got = read_all(stack, topics.tasks, 12, f"g-{unique}")
    assert len(got) == 12 and all(isinstance(e.event, Task) for e in got)
