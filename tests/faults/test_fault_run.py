"""The loop under faults, judged by the checker that reads the whole log afterwards.

Short form (default suite): on the shared session stack, the tiny-model loop with one trainer
`kill -9` at a seeded fault point (after a step, during upload, or between upload and announce),
one explorer `kill -9` inside its transaction, a corrupt record among the tasks and one among the
experiences, and a byte flipped in a published checkpoint. Long form (`slow`: `make test-faults`
or `pytest -m slow tests/faults/test_fault_run.py -s`): a private stack (own ports and dirs, so
nobody else's broker is restarted), two explorers sharing a group, five trainer kills, both
explorer kills, a MinIO restart while the trainer uploads, the corrupt records and the flipped byte; it prints
the table.

`RFT_FAULTS_SEED=N` reruns a seed; `RFT_FAULTS_KINDS=a,b` replaces the long form's kinds and
`RFT_FAULTS_KINDS=+fence,kafka_outage` adds to them. The 10,000-experience run
(`test_ten_thousand_experience_fault_run`, `slow`) adds three broker outages longer than the
session timeout and, last, the fence (a second trainer takes the run over; the first exits
fenced and is not restarted) to the long form's kinds.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from rft.config.connections import StackSettings
from rft.stack.local_stack import LocalStack
from tests.faults.driver import TRAINER_KILL_POINTS, LoopRun, fault_table

pytestmark = [pytest.mark.faults, pytest.mark.integration]


def seed() -> int:
    given = os.environ.get("RFT_FAULTS_SEED")
    return int(given) if given else random.SystemRandom().randrange(1 << 31)


def assert_clean(run: LoopRun, report) -> None:
    table = "\n".join(fault_table(run, report))
    print(table)
    assert report.ok, table
    dead = report.facts
    for topic, n in run.corrupt_sent.items():
        assert dead.get(f"  from {topic}", 0) >= n, f"corrupt record in {topic} not parked\n{table}"
    assert report.facts["tasks published"] == run.batch_size * run.steps, table
    assert report.facts["tasks not reached by the explorers"] == 0, table
    assert report.facts["experiences trained"] == run.batch_size * 4 * run.steps, table
    assert report.facts["stored versions failing verification now"] == len(run.tampered), table


def test_short_fault_run(stack: StackSettings, tmp_path: Path, unique: str) -> None:
    s = seed()
    point = random.Random(s).choice(TRAINER_KILL_POINTS)
    # in this order, so that each finds its moment within four steps
    kinds = [
        "corrupt_task",
        "explorer_kill_in_transaction",
        f"trainer_kill@{point}",
        "corrupt_experience",
        "checkpoint_flip",
    ]
    run = LoopRun(
        stack, tmp_path, s, kinds, steps=4, name=unique, session_timeout_ms=10000, shuffle=False
    )
    report = run.execute(timeout_s=540)
    assert_clean(run, report)
    assert not run.skipped, "\n".join(fault_table(run, report))


def long_kinds(s: int) -> list[str]:
    rng = random.Random(s)
    # every kill point once, two more drawn by the seed: five trainer kills
    kills = list(TRAINER_KILL_POINTS) + [rng.choice(TRAINER_KILL_POINTS) for _ in range(2)]
    kinds = [f"trainer_kill@{p}" for p in kills] + [
        "explorer_kill_in_transaction",
        "explorer_kill_one_of_two",
        "minio_restart",
        "corrupt_task",
        "corrupt_experience",
        "checkpoint_flip",
    ]
    given = os.environ.get("RFT_FAULTS_KINDS", "")
    if given.startswith("+"):
        return kinds + [k for k in given[1:].split(",") if k]
    return [k for k in given.split(",") if k] or kinds


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_long_fault_run(private_stack: LocalStack, tmp_path: Path, unique: str) -> None:
    s = seed()
    run = LoopRun(
        private_stack.stack_settings(),
        tmp_path,
        s,
        long_kinds(s),
        steps=16,
        explorers=2,
        local=private_stack,
        name=unique,
    )
    report = run.execute(timeout_s=2200)
    assert_clean(run, report)
    assert not run.skipped, "\n".join(fault_table(run, report))


@pytest.mark.slow
@pytest.mark.timeout(5400)
def test_ten_thousand_experience_fault_run(
    private_stack: LocalStack, tmp_path: Path, unique: str
) -> None:
    """The long form at scale: two explorers, 80 steps of 32 tasks x 4 rollouts (10,240
    experiences), every kind of the long form plus repeated broker outages longer than the
    session timeout and, last, the fence (a second trainer takes the run over)."""
    s = seed()
    kinds = long_kinds(s) + ["kafka_outage"] * 3 + ["fence"]
    run = LoopRun(
        private_stack.stack_settings(),
        tmp_path,
        s,
        kinds,
        steps=80,
        explorers=2,
        local=private_stack,
        name=unique,
        session_timeout_ms=10_000,
        batch_size=32,
    )
    report = run.execute(timeout_s=5000)
    assert_clean(run, report)
    assert report.facts["experiences trained"] >= 10_000
    assert not run.skipped, "\n".join(fault_table(run, report))
