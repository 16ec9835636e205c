"""Repeated broker outages longer than the session timeout, with the other fault kinds, in both
Kafka clients, judged by the checker (`rft check`'s RunChecker) that reads the whole log after.

Each outage is a `kill -9` of the private stack's broker, kept down past the consumers' session
timeout (10 s here), so every member's session expires: the explorer group and the trainer group
both rebalance when the broker is back, with partitions revoked or lost and handed straight back
to the same member. What must hold: every task explored once, every experience trained once,
no version forked or announced without its manifest, and no process reports the broker's restart
as a fence.

`RFT_FAULTS_SEED=N` reruns a seed.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rft.stack.local_stack import LocalStack
from tests.faults.driver import LoopRun, fault_table
from tests.faults.test_fault_run import assert_clean, seed

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.slow]

OUTAGES = 3


def outage_kinds(s: int) -> list[str]:
    rng = random.Random(s)
    point = rng.choice(["trainer.after_step", "checkpoint.before_manifest"])
    return ["kafka_outage"] * OUTAGES + [
        f"trainer_kill@{point}",
        "explorer_kill_in_transaction",
    ]


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_repeated_broker_outages(
    private_stack: LocalStack, tmp_path: Path, unique: str, client: str
) -> None:
    s = seed()
    run = LoopRun(
        private_stack.stack_settings(),
        tmp_path,
        s,
        outage_kinds(s),
        steps=16,
        local=private_stack,
        name=unique,
        session_timeout_ms=10_000,
        client=client,
    )
    report = run.execute(timeout_s=1300)
    assert_clean(run, report)
    assert not run.skipped, "\n".join(fault_table(run, report))
    # a process ends on a fence with exit FENCED_EXIT_CODE; a fence the broker made on its own
    # (no other process holds the id) is logged as a warning and the process goes on
    fenced = [c.name for c in run.components.values() if c.fenced]
    unplanned = [u for c in run.components.values() for u in c.unplanned]
    assert not unplanned, "unplanned exits under outages\n" + "\n".join(fault_table(run, report))
    assert not fenced, f"a broker restart reported as a fence by {fenced}\n" + "\n".join(
        fault_table(run, report)
    )
