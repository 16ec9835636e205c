"""`rft status` against the real broker, with a run's consumer groups live: two explorers that
share the task group (each with its own weights follower), a trainer group, announced versions,
metrics and a dead letter."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack

import pytest

from rft.config.connections import StackSettings
from rft.consumers.explorer.progress import progress_metadata
from rft.errors import TasksetError
from rft.events.models import DeadLetter, Experience, Metric, Task, WeightVersion
from rft.events.reader import EventReader
from rft.events.topics import TopicNames, ensure_topics
from rft.events.writer import EventWriter

pytestmark = pytest.mark.integration


def wait_until(what: str, check, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen in {timeout_s}s"


def exp(i: int, explorer: str, version: int) -> Experience:
    return Experience(
        experience_id=f"e{i}",
        task_id=f"t{i}",
        group_id=f"t{i}",
        group_size=1,
        explorer_id=explorer,
        explorer_group="g",
        model_version=version,
        prompt_ids=[1, 2],
        response_ids=[3],
        logprobs=[-0.5],
        created_at=1_767_225_600_000 + i,
    )


def test_status_reports_topics_lag_versions_explorers_and_dead_letters(
    stack: StackSettings, unique: str
) -> None:
    kafka = stack.kafka
    names = TopicNames.for_run(unique, "live")
    run = f"{unique}.live"
    ensure_topics(kafka, names)
    with EventWriter.open(kafka) as w:
        for i in range(8):
            w.send(names.tasks, Task(f"t{i}", "s", 0, i, {"q": i}), key=f"t{i}")
        for v in (1, 2):
            w.send(names.weights, WeightVersion(version=v, train_step=v, uri=f"s3://b/v{v}"))
        w.send(names.metrics, Metric("explorer", run, 3, {"model_version": 2.0, "tasks": 2.0}))
        w.send(names.metrics, Metric("trainer", run, 2, {"step_time_s": 1.0}))
        w.send(
            names.dead_letter,
            DeadLetter.for_error(
                TasksetError("bad row"),
                topic=names.tasks,
                partition=0,
                offset=0,
                payload=b"x",
                consumer=f"{run}.explorer.main",
            ),
        )
    with ExitStack() as live:
        # two explorer processes: members of the task group, each with its own weights follower
        tasks = [
            live.enter_context(EventReader.open(kafka, f"{run}.explorer.main", [names.tasks]))
            for _ in range(2)
        ]
        followers = [
            live.enter_context(EventReader.open(kafka, f"{run}.weights.{who}", [names.weights]))
            for who in ("host-a", "host-b")
        ]
        got: dict = {}  # (partition, offset) -> envelope: a rebalance may hand a task out twice

        def joined() -> bool:
            for t in tasks:
                got.update({(e.partition, e.offset): e for e in t.poll(10, 0.2)})
            return len(got) == 8 and all(t.assignment() for t in tasks)

        wait_until("both explorers joined and read the tasks", joined)
        for f in followers:
            wait_until("weights follower joined", lambda f=f: f.poll(10, 0.2) or f.assignment())
        mine = {
            n: sorted(
                (e for e in got.values() if (e.topic, e.partition) in tasks[n].assignment()),
                key=lambda e: (e.partition, e.offset),
            )
            for n in (0, 1)
        }
        for n, (who, version) in enumerate((("host-a", 1), ("host-b", 2))):
            with EventWriter.open(kafka, transactional_id=f"{run}.x.{who}") as tx:
                tx.begin()
                tx.send(names.experiences, exp(n, who, version), key=f"t{n}")
                tx.send(names.experiences, exp(10 + n, who, version - 1), key=f"t{10 + n}")
                # the explorer commits only its first task: one task of its partitions waits
                tx.send_offsets(tasks[n], mine[n][:1], progress_metadata(5 + n, who))
                tx.commit()
        with EventReader.open(kafka, f"{run}.trainer.trainer", [names.experiences]) as trainer:
            read: list = []
            wait_until("trainer read", lambda: read.extend(trainer.poll(10, 0.5)) or len(read) == 4)
            trainer.commit(read[:1])
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "rft.cli.main",
                "status",
                "--project",
                unique,
                "--name",
                "live",
                "--bootstrap",
                kafka.bootstrap_servers,
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        text = subprocess.run(
            [
                sys.executable,
                "-m",
                "rft.cli.main",
                "status",
                "--project",
                unique,
                "--name",
                "live",
                "--bootstrap",
                kafka.bootstrap_servers,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    topics = {t["topic"]: t for t in status["topics"]}
    assert topics[names.tasks]["held_offsets"] == 8 and topics[names.weights]["end_offsets"] == {
        "0": 2
    }
    assert status["trainer_version"] == 2 and status["trainer_step"] == 2
    groups = {g["group_id"]: g for g in status["groups"]}
    explorers = groups[f"{run}.explorer.main"]
    assert explorers["role"] == "explorer" and explorers["state"] == "stable"
    assert explorers["members"] == 2
    committed = {(p["topic"], p["partition"]): p for p in explorers["partitions"]}
    # every task partition is held by a member; those never committed say so
    assert len(committed) == 4
    assert sum(p["committed"] is None and p["lag"] is None for p in committed.values()) == 4 - len(
        {(e.topic, e.partition) for n in (0, 1) for e in mine[n][:1]}
    )
    for n in (0, 1):
        first = mine[n][0]
        part = committed[(first.topic, first.partition)]
        assert part["committed"] == first.offset + 1
        assert part["lag"] == topics[names.tasks]["end_offsets"][str(first.partition)] - (
            first.offset + 1
        )
    trainer = groups[f"{run}.trainer.trainer"]
    (part,) = trainer["partitions"]  # it committed one partition only
    first = read[0]
    assert (part["partition"], part["committed"]) == (first.partition, first.offset + 1)
    end = topics[names.experiences]["end_offsets"][str(first.partition)]
    assert part["end"] == end and trainer["lag"] == end - first.offset - 1 > 0
    by_id = {e["explorer_id"]: e for e in status["explorers"]}
    assert set(by_id) == {"host-a", "host-b"}
    assert by_id["host-a"]["live"] and by_id["host-b"]["live"]
    # each one's version is that of its newest experience, its step the one it committed
    assert (by_id["host-a"]["loaded_version"], by_id["host-a"]["step"]) == (0, 5)
    assert (by_id["host-b"]["loaded_version"], by_id["host-b"]["step"]) == (1, 6)
    assert status["explorer_metric"]["model_version"] == 2.0
    assert status["dead_letters"] == 1
    assert status["dead_letters_by_error"] == {"rft.errors.TasksetError": 1}
    assert text.returncode == 0, text.stderr
    assert "explorers: 2 live" in text.stdout and "dead letters: 1" in text.stdout
    # once the processes are gone, the explorers are listed as gone
    gone = subprocess.run(
        [
            sys.executable,
            "-m",
            "rft.cli.main",
            "status",
            "--project",
            unique,
            "--name",
            "live",
            "--bootstrap",
            kafka.bootstrap_servers,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert not any(e["live"] for e in json.loads(gone.stdout)["explorers"])
