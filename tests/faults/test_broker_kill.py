"""Kafka is killed (-9) under a running `rft tail`: a clear error and a non-zero exit, no hang;
after the stack is brought up again, every event published before the kill is still there.

Kafka is stopped (SIGSTOP) while a transaction commits, with either client: the commit ends in
an outage error once the writer's outage window has passed (kafka-python's own commit takes no
timeout: it waited for its 30 s request timeout, then failed with an error that is not an
outage); once Kafka goes on (SIGCONT) the same commit, called again, completes, and the
transaction's records are read once.

The test runs its own LocalStack (`private_stack` in conftest.py: private root and ports) so
killing its broker disturbs no other test that shares the session stack.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from rft.config.connections import KafkaSettings
from rft.errors import OutageError
from rft.events.models import Metric
from rft.events.reader import EventReader
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.stack.local_stack import LocalStack

# multi-process fault runs: in `make test-faults` (and `make test-all`), kept out of `make test`
pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.slow]

EVENTS = 50


def read_lines(stream, into: list[str]) -> None:
    for line in stream:
        into.append(line)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_tail_exits_non_zero_when_kafka_dies_and_events_survive_restart(
    private_stack: LocalStack, client: str, unique: str
) -> None:
    kafka: KafkaSettings = dataclasses.replace(private_stack.stack_settings().kafka, client=client)
    topic = f"faults.{unique}.metrics"
    ensure_topics(kafka, [topic])
    sent = [
        Metric(component="c", run=unique, step=i, values={"v": float(i)}) for i in range(EVENTS)
    ]
    with EventWriter.open(kafka) as writer:
        for m in sent:
            writer.send(topic, m, key=str(m.step))

    command = [sys.executable, "-m", "rft.cli.main", "tail", topic, "--from-beginning"]
    command += ["--bootstrap", kafka.bootstrap_servers, "--client", client]
    command += ["--unreachable-timeout", "5"]
    tail = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    stdout: list[str] = []
    stderr: list[str] = []
    readers = [
        threading.Thread(target=read_lines, args=(tail.stdout, stdout), daemon=True),
        threading.Thread(target=read_lines, args=(tail.stderr, stderr), daemon=True),
    ]
    for t in readers:
        t.start()
    try:
        deadline = time.monotonic() + 60
        while len(stdout) < EVENTS and time.monotonic() < deadline and tail.poll() is None:
            time.sleep(0.1)
        assert len(stdout) == EVENTS, f"tail printed {len(stdout)} lines; stderr: {stderr}"

        pid = private_stack.status().service("kafka").pid
        assert pid
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        rc = tail.wait(timeout=90)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
    for t in readers:
        t.join(timeout=5)
    assert rc != 0
    message = "".join(stderr)
    assert "rft tail: error:" in message
    assert "unreachable" in message and kafka.bootstrap_servers in message
    assert time.monotonic() - killed_at < 60

    private_stack.up(timeout_s=180)
    with EventReader.open(kafka, f"after-{unique}", [topic]) as reader:
        got = []
        deadline = time.monotonic() + 90
        while len(got) < EVENTS and time.monotonic() < deadline:
            got += reader.poll(100, 0.5)
    assert sorted((e.event for e in got), key=lambda m: m.step) == sent


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_a_commit_while_kafka_is_stopped_ends_after_the_window_and_completes_later(
    private_stack: LocalStack, client: str, unique: str
) -> None:
    window_s = 12.0
    kafka: KafkaSettings = dataclasses.replace(
        private_stack.stack_settings().kafka, client=client, outage_timeout=window_s
    )
    topic = f"faults.{unique}.commit"
    ensure_topics(kafka, [topic])
    sent = [Metric(component="c", run=unique, step=i, values={"v": float(i)}) for i in range(3)]
    writer = EventWriter.open(kafka, transactional_id=f"tx-{unique}")
    writer.begin()
    for m in sent:
        writer.send(topic, m, key=str(m.step))
    writer.flush()  # the records are on the broker; only the commit is left

    pid = private_stack.status().service("kafka").pid
    assert pid
    outcome: list[BaseException | None] = []

    def commit() -> None:
        try:
            writer.commit()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        worker = threading.Thread(target=commit, daemon=True)
        worker.start()
        worker.join(window_s + 60)
        took = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    assert outcome, f"the commit still blocked {took:.0f}s after Kafka stopped"
    assert isinstance(outcome[0], OutageError), repr(outcome[0])
    assert took >= window_s

    writer.commit()  # Kafka goes on: the commit left pending completes
    writer.close()
    with EventReader.open(kafka, f"after-{unique}", [topic]) as reader:
        got = []
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            got += reader.poll(100, 0.5)
        extra_until = time.monotonic() + 3
        while time.monotonic() < extra_until:
            got += reader.poll(100, 0.5)
    assert sorted((e.event for e in got), key=lambda m: m.step) == sent
