"""The task feeder of an online selector (difficulty_based) on the real Kafka broker.

An answering explorer stands in for the rollouts so the rewards are known: rows 0-3 of the
taskset are always solved, rows 4-7 never, rows 8-11 half the time. With a target pass rate of
0.5 the feeder must stop choosing a row once its rewards show it is far from the target, and a
feeder stopped after three rounds and started again must publish exactly the rounds an
uninterrupted feeder publishes: its selector's state is rebuilt from the experience log and its
round count from its committed offsets' metadata. The checks read the tasks topic.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.run_plan import RunPlan
from rft.consumers.tasks.feeder import TaskFeeder, parse_online_task_id
from rft.events.models import Experience, Metric, Task
from rft.events.reader import EventReader
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.producers.taskset_reader import load_taskset
from tests.topic_log import read_topic

pytestmark = pytest.mark.integration

ROWS = 12
BATCH = 4
ROUNDS = 6
REWARDS = {**dict.fromkeys(range(4), (1.0, 1.0)), **dict.fromkeys(range(4, 8), (0.0, 0.0))}
REWARDS |= dict.fromkeys(range(8, 12), (1.0, 0.0))


def feeder_config(stack: StackSettings, name: str, tmp: Path) -> Path:
    rows = tmp / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
            for i in range(ROWS)
        )
    )
    config = {
        "project": "rft-it",
        "name": name,
        "mode": "both",
        "checkpoint_root_dir": str(tmp / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {"model_path": "tiny"},
        "buffer": {
            "batch_size": BATCH,
            "total_steps": ROUNDS,
            "explorer_input": {
                "default_workflow_type": "math_workflow",
                "taskset": {
                    "name": "rated",
                    "path": str(rows),
                    "format": {"prompt_key": "question", "response_key": "answer"},
                    "task_selector": {
                        "selector_type": "difficulty_based",
                        "kwargs": {"target_reward": 0.5, "tau": 0.02, "lookahead_batches": 1},
                    },
                },
            },
        },
        "stack": {
            "kafka": {"bootstrap_servers": stack.kafka.bootstrap_servers},
            "object_store": {"endpoint": stack.object_store.endpoint, "bucket": "rft-it"},
        },
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def answer_tasks(cfg, plan: RunPlan, done: threading.Event) -> None:
    """A stand-in explorer: every task gets its row's two rewards as one rollout group."""
    with (
        EventReader.open(cfg.stack.kafka, f"{plan.run_id}.answers", [plan.topics.tasks]) as tasks,
        EventWriter.open(cfg.stack.kafka) as writer,
    ):
        while not done.is_set():
            got = tasks.poll(50, timeout_s=0.5)
            for env in got:
                task = env.event
                assert isinstance(task, Task)
                for i, reward in enumerate(REWARDS[task.index]):
                    exp = Experience(
                        experience_id=f"{task.task_id}:g:{i}",
                        task_id=task.task_id,
                        group_id=f"{task.task_id}:g",
                        group_size=2,
                        explorer_id="stand-in",
                        model_version=0,
                        prompt_ids=np.array([1, 2], dtype=np.int32),
                        response_ids=np.array([3], dtype=np.int32),
                        logprobs=np.array([-0.5], dtype=np.float32),
                        reward=reward,
                    )
                    writer.send(plan.experience_topic, exp, key=task.task_id)
            if got:
                writer.flush()


def rounds_on_topic(cfg, plan: RunPlan, group: str) -> list[list[int]]:
    rounds: dict[int, list[int]] = {}
    for env in read_topic(cfg.stack.kafka, plan.topics.tasks, group):
        parsed = parse_online_task_id(env.event.task_id)
        assert parsed is not None and parsed[0] == "rated"
        rounds.setdefault(parsed[1], []).append(parsed[2])
    return [sorted(rounds[k]) for k in sorted(rounds)]


def feed(config_path: Path, stops_after: tuple[int, ...]) -> tuple:
    """Run feeders one after another (each stopping after its share of rounds; None: to the
    end) against the stand-in explorer; the tasks topic's rounds and the feeders' summaries."""
    cfg = load_config(config_path)
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, plan.topics)
    done = threading.Event()
    explorer = threading.Thread(target=answer_tasks, args=(cfg, plan, done), daemon=True)
    explorer.start()
    summaries = []
    try:
        for rounds in stops_after:
            feeder = TaskFeeder(cfg, load_taskset(cfg.buffer.explorer_input.taskset))
            summaries.append(feeder.run(max_rounds=rounds or None))
    finally:
        done.set()
        explorer.join(timeout=30)
    return rounds_on_topic(cfg, plan, f"{plan.run_id}.check"), summaries, cfg, plan


def test_feeder_steers_to_the_target_and_resumes_exactly(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    interrupted, summaries, cfg, plan = feed(feeder_config(stack, unique + "a", tmp_path), (3, 0))
    assert len(interrupted) == ROUNDS and all(len(r) == BATCH for r in interrupted)
    first, second = summaries
    assert (first.rounds, second.resumed_rounds, second.rounds) == (3, 3, ROUNDS)
    # the restarted feeder re-read every reward of the first three rounds before choosing, and
    # (one batch outstanding at most) each choice saw every reward of the batches before it
    assert second.observed_at_round == [r * BATCH * 2 for r in range(3, ROUNDS)]
    assert first.observed_at_round == [r * BATCH * 2 for r in range(3)]

    straight, _, _, _ = feed(feeder_config(stack, unique + "b", tmp_path), (0,))
    assert interrupted == straight

    known: dict[int, float] = {}
    for r, rows in enumerate(straight):
        for row in rows:
            # once its rewards are in, a row far from the target is never chosen again
            assert known.get(row, 0.5) == 0.5, (r, row, known)
        for row in rows:
            known[row] = sum(REWARDS[row]) / 2
    assert {row for rows in straight for row in rows} & set(range(8, 12))

    metrics = []
    with EventReader.open(
        cfg.stack.kafka, unique + "m", [plan.topics.metrics], from_beginning=True
    ) as r:
        for _ in range(5):
            metrics += [e.event for e in r.poll(100, timeout_s=1.0)]
    rounds = [m for m in metrics if isinstance(m, Metric) and m.component == "feeder"]
    assert [m.step for m in rounds] == list(range(1, ROUNDS + 1))
