"""The selector's order is the order explored, across the partitions of the tasks topic.

An `offline_easy2hard` taskset is published to a tasks topic of 4 partitions. One explorer
explores it in exactly the published sequence; two explorers of one group each explore their
share in increasing position, and between them every task once. The explored order is read back
from the experience topic, which has one partition here, so its order is the order the explorers
committed their experiences (a step writes its tasks' groups in batch order).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import threading
import time
from pathlib import Path

import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.config.stream_start import StreamStart
from rft.consumers.explorer.explorer import Explorer
from rft.consumers.run_plan import RunPlan
from rft.consumers.tasks.order import OrderedTasks, PartitionEnds
from rft.events.models import Experience, Task
from rft.events.reader import EventReader
from rft.events.topics import ensure_topics
from rft.events.transport import kafka_backend
from rft.events.writer import EventWriter
from rft.producers.task_publisher import (
    epoch_order,
    load_run_tasksets,
    publish_atomically,
)
from tests.integration.test_rft_loop import read_all
from tests.topic_log import read_topic

pytestmark = pytest.mark.integration

ROWS = 48
PARTITIONS = 4


def curriculum_run(stack: StackSettings, unique: str, tmp_path: Path, batch_size: int):
    """A run config over a rated taskset, its plan and the tasks' topics; returns them and a
    function that publishes the taskset (in one transaction, as `rft publish` does) and returns
    the published sequence of task ids."""
    rng = random.Random(7)
    rows = []
    for _ in range(ROWS):
        a, b = rng.randrange(10), rng.randrange(10)
        rows.append({"question": f"What is {a} + {b}?", "answer": a + b, "pass_rate": rng.random()})
    data = tmp_path / "rated.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    raw = {
        "project": "rft-it",
        "name": unique,
        "mode": "explore",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {"model_path": "tiny", "max_prompt_tokens": 64, "max_response_tokens": 4},
        "buffer": {
            "batch_size": batch_size,
            # exactly the tasks' steps (the load refuses more): a group of two stops when idle
            "total_steps": ROWS // batch_size,
            "explorer_input": {
                "default_workflow_type": "math_workflow",
                "default_reward_fn_type": "math_reward",
                "taskset": {
                    "name": "rated",
                    "path": str(data),
                    "format": {"prompt_key": "question", "response_key": "answer"},
                    "task_selector": {
                        "selector_type": "offline_easy2hard",
                        "feature_keys": ["pass_rate"],
                    },
                },
            },
        },
        "explorer": {"eval_on_startup": False, "eval_interval": 1000, "max_explorers": 2},
        "synchronizer": {"sync_style": "trainer_driven"},  # the explorers never wait for weights
        "stack": {
            # one partition for every topic but tasks: the experience log is in commit order
            "kafka": {"bootstrap_servers": stack.kafka.bootstrap_servers, "partitions": 1},
            "object_store": {"endpoint": stack.object_store.endpoint, "bucket": "rft-it"},
        },
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, [plan.topics.tasks], partitions={plan.topics.tasks: PARTITIONS})
    plan.ensure_topics()
    (taskset,) = load_run_tasksets(cfg)

    def publish() -> list[str]:
        publish_atomically(
            cfg.stack.kafka, [taskset], plan.topics, epochs=1, seed=0, transactional_id=unique
        )
        return [f"rated:0:{taskset.rows[i].index}" for i in epoch_order(taskset, 0, 0)]

    return cfg, plan, publish


def partition_order(cfg, topic: str, group: str) -> tuple[list[str], dict[str, int]]:
    """The tasks as a plain consumer reads them (partition by partition), and their positions."""
    tasks = [e for e in read_all(cfg, topic, group) if isinstance(e, Task)]
    return [t.task_id for t in tasks], {t.task_id: t.position for t in tasks}  # type: ignore[misc]


def explored(cfg, topic: str, group: str) -> list[Experience]:
    """The first experience of each rollout group on `topic`, in log order."""
    out = [e.event for e in read_topic(cfg.stack.kafka, topic, group)]
    return [e for e in out if isinstance(e, Experience) and e.experience_id == f"{e.group_id}:0"]


def test_one_explorer_explores_the_published_sequence_across_partitions(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    cfg, plan, publish = curriculum_run(stack, unique, tmp_path, batch_size=4)
    published = publish()
    as_read, position = partition_order(cfg, plan.topics.tasks, f"{unique}-tasks")
    assert sorted(as_read, key=position.__getitem__) == published
    # the tasks are spread: read partition by partition they are not in the selector's order
    assert as_read != published

    summary = Explorer(cfg, explorer_id="one", idle_timeout_s=8).run()
    assert summary.tasks == ROWS

    experiences = explored(cfg, plan.explorer_experience_topic, f"{unique}-exp")
    assert [e.task_id for e in experiences] == published


def test_two_explorers_of_a_group_each_follow_the_published_order(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    cfg, plan, publish = curriculum_run(stack, unique, tmp_path, batch_size=2)
    summaries = {}

    def member(explorer_id: str) -> None:
        summaries[explorer_id] = Explorer(cfg, explorer_id=explorer_id, idle_timeout_s=40).run()

    threads = [threading.Thread(target=member, args=(who,)) for who in ("a", "b")]
    for thread in threads:
        thread.start()

    def both_hold_partitions() -> bool:
        with kafka_backend(cfg.stack.kafka).admin() as admin:
            (group,) = admin.describe_groups([plan.explorer_group])
        return group.state == "stable" and sum(bool(m.assignment) for m in group.members) == 2

    # the tasks come once both members share the partitions, so both explore some
    deadline = time.monotonic() + 120
    while not both_hold_partitions():
        assert time.monotonic() < deadline, "the two explorers never split the partitions"
        time.sleep(0.5)
    published = publish()
    for thread in threads:
        thread.join(timeout=600)
    assert set(summaries) == {"a", "b"}
    _, position = partition_order(cfg, plan.topics.tasks, f"{unique}-tasks")

    experiences = explored(cfg, plan.explorer_experience_topic, f"{unique}-exp")
    assert sorted(e.task_id for e in experiences) == sorted(published)  # each task once
    for who in ("a", "b"):
        mine = [position[e.task_id] for e in experiences if e.explorer_id == who]
        assert mine, f"explorer {who} explored nothing"
        assert mine == sorted(mine), who


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_a_member_living_off_its_buffer_lets_a_newcomer_take_its_share(
    stack: StackSettings, unique: str, client: str
) -> None:
    """The first member reads every task into its merge buffer on its first poll, then makes
    batches from the buffer. A second member that joins then gets its partitions while the first
    is still making batches, not once the first has run dry: each batch polls the group."""
    kafka = dataclasses.replace(stack.kafka, client=client)
    topic, group = f"{unique}.tasks", f"{unique}.explorer.main"
    ensure_topics(kafka, [topic], partitions={topic: PARTITIONS})
    with EventWriter.open(kafka) as w:
        for i in range(64):
            w.send(topic, Task(f"t{i}", "s", 0, i, {}, position=i), key=f"t{i}")
        w.flush()

    def ordered() -> OrderedTasks:
        return OrderedTasks(PartitionEnds(kafka, group, StreamStart("earliest")))

    stop = threading.Event()
    with (
        EventReader.open(kafka, group, [topic], from_beginning=True) as first,
        EventReader.open(kafka, group, [topic], from_beginning=True) as second,
    ):
        first_order = ordered()
        taken = first_order.batch(first, 2, stop)
        assert len(taken) == 2 and len(first.assignment()) == PARTITIONS
        second_order = ordered()
        batches = 0
        while not second.assignment():
            # the first would need 31 batches of 2 to run dry: it never gets near that here
            assert batches < 10, "the newcomer got no partition while the first made batches"
            second_order.batch(second, 2, stop)  # joins, and waits its turn
            taken += first_order.batch(first, 2, stop)
            batches += 1
        for _ in range(10):  # the first learns of its smaller share in its next polls
            if len(first.assignment()) + len(second.assignment()) == PARTITIONS:
                break
            first_order.batch(first, 2, stop)
        assert len(first.assignment()) + len(second.assignment()) == PARTITIONS
        assert set(first.assignment()).isdisjoint(second.assignment())


def test_a_partition_read_late_is_not_starved_by_a_full_buffer(
    stack: StackSettings, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A taskset larger than one poll: the first poll may fill the merge's buffer with the
    records of some partitions only. The merge must go on reading until every partition has a
    head, rather than wait out STALL_S and relax the published order (seen on an H100: 1,000
    tasks over 4 partitions, two partitions never read in a whole run)."""
    kafka = stack.kafka
    topic, group = f"{unique}.tasks", f"{unique}.explorer.main"
    ensure_topics(kafka, [topic], partitions={topic: PARTITIONS})
    total = 1000
    with EventWriter.open(kafka) as w:
        for i in range(total):
            w.send(topic, Task(f"t{i}", "s", 0, i, {}, position=i), key=f"t{i}")
        w.flush()
    stop = threading.Event()
    with EventReader.open(kafka, group, [topic], from_beginning=True) as reader:
        ordered = OrderedTasks(PartitionEnds(kafka, group, StreamStart("earliest")))
        taken: list[int | None] = []
        with caplog.at_level(logging.WARNING, logger="rft.consumers.tasks.order"):
            while len(taken) < 96:
                batch = [env.event for env in ordered.batch(reader, 32, stop)]
                taken += [t.position for t in batch if isinstance(t, Task)]
    assert taken == list(range(96)), taken[:40]
    assert "nothing to read" not in caplog.text  # no partition's order was given up on
