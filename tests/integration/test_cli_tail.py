"""`rft tail` as a user runs it: a subprocess against the real broker."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from rft.config.connections import KafkaSettings
from rft.events.models import Experience, Metric, Task
from rft.events.topics import TopicNames, ensure_topics
from rft.events.writer import EventWriter

pytestmark = pytest.mark.integration


def rft(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rft.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_tail_prints_one_line_per_event_with_its_place(stack, unique: str, client: str) -> None:
    kafka: KafkaSettings = stack.kafka
    names = TopicNames.for_run(unique, "tail")
    ensure_topics(dataclasses.replace(kafka, partitions=1), [names.experiences])
    experience = Experience(
        experience_id="e1",
        task_id="t1",
        group_id="t1",
        group_size=1,
        explorer_id="x",
        model_version=2,
        prompt_ids=np.arange(100, dtype=np.int32),
        response_ids=np.arange(1000, dtype=np.int32),
        logprobs=np.zeros(1000, dtype=np.float32),
    )
    with EventWriter.open(kafka) as writer:
        writer.send(names.experiences, experience, key="t1")
        writer.send_raw(names.experiences, b"\x00junk", key=b"k")
        writer.send(names.experiences, Metric(component="c", run="r", step=7, values={"a": 1.0}))
        writer.send(names.experiences, Task("s:0:3", "s", 0, 3, {"q": 1}, position=5), key="s:0:3")
    done = rft(
        "tail",
        "experiences",
        "--project",
        unique,
        "--name",
        "tail",
        "--from-beginning",
        "--max",
        "4",
        "--bootstrap",
        kafka.bootstrap_servers,
        "--client",
        client,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4
    first, second, third, fourth = lines
    assert first.startswith(f"{names.experiences}[0]@0 key=t1 Experience ")
    assert '"response_ids": "int32[1000] [0, 1, 2, 3, ...]"' in first
    assert len(first) < 1000  # arrays are summarised, not dumped
    assert second.startswith(f"{names.experiences}[0]@1 key=k UNDECODABLE CorruptEventError")
    assert re.match(rf"{re.escape(names.experiences)}\[0\]@2 key=- Metric .*\"step\": 7", third)
    # a task shows its place in the published sequence
    assert re.match(
        rf"{re.escape(names.experiences)}\[0\]@3 key=s:0:3 Task .*\"position\": 5", fourth
    )
    assert "4 event(s)" in done.stderr


def test_tail_stops_after_timeout_without_new_events(stack, unique: str) -> None:
    topic = f"{unique}.quiet"
    ensure_topics(stack.kafka, [topic])
    done = rft("tail", topic, "--timeout", "2", "--bootstrap", stack.kafka.bootstrap_servers)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


def test_tail_without_a_broker_fails_clearly(stack) -> None:
    started = time.monotonic()
    done = rft("tail", "anything", "--bootstrap", "127.0.0.1:1", "--unreachable-timeout", "2")
    assert done.returncode == 1
    assert "rft tail: error:" in done.stderr and "127.0.0.1:1" in done.stderr
    assert "unreachable" in done.stderr
    assert time.monotonic() - started < 60
