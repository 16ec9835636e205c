"""Two explorer processes with one explorer id: the second fences the first.

Explorer A (fixed sync) commits step 1 and waits for weight version 1. B starts with the same
explorer id: claiming its transactional id fences A. A trainer then publishes v1; both go on to
step 2, sharing the task partitions, and A's step-2 transaction fails: it exits non-zero with
the fence line and commits nothing. B commits step 2. The experience topic (read_committed)
holds exactly two steps' experiences.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rft.config.connections import StackSettings
from rft.errors import FENCED_EXIT_CODE
from rft.events.models import Experience
from rft.events.transport import kafka_backend
from tests.integration.test_rft_loop import published_run, read_all

# multi-process fault runs: in `make test-faults` (and `make test-all`), kept out of `make test`
pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.slow]

# the second process takes the id over twice: its producer's transactional id (the first to
# notice wins the race) and its consumer's static group.instance.id
FENCE_LINE = "rft explore: error: fenced: another process"


def rft(verb: str, config: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rft.cli.main", verb, "--config", str(config), *extra]


def start_explorer(config: Path, log: Path) -> subprocess.Popen[str]:
    argv = rft("explore", config, "--explorer-id", "dup", "--override", "buffer.total_steps=2")
    with log.open("w") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True)


def wait_for(what: str, holds, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not holds():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.5)


def test_second_explorer_with_one_id_fences_the_first(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config, cfg, plan = published_run(stack, unique, tmp_path, "fixed", 1)
    per_step = cfg.buffer.batch_size * cfg.algorithm.repeat_times

    def committed_step() -> int:
        with kafka_backend(cfg.stack.kafka).admin() as admin:
            offsets = admin.group_offsets(plan.explorer_group)
        return max((json.loads(o.metadata)["step"] for o in offsets if o.metadata), default=0)

    log_a, log_b = tmp_path / "explorer-a.log", tmp_path / "explorer-b.log"
    a = start_explorer(config, log_a)
    b: subprocess.Popen[str] | None = None
    try:
        wait_for("explorer A to commit step 1", lambda: committed_step() == 1)
        b = start_explorer(config, log_b)
        wait_for(
            "explorer B to claim the id", lambda: "holds transactional id" in log_b.read_text()
        )
        trained = subprocess.run(
            rft("train", config, "--override", "buffer.total_steps=1"),
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-3000:]
        a_rc = a.wait(timeout=300)
        b_rc = b.wait(timeout=300)
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
    out_a, out_b = log_a.read_text(), log_b.read_text()
    assert a_rc == FENCED_EXIT_CODE and FENCE_LINE in out_a, out_a[-3000:]
    assert b_rc == 0, out_b[-3000:]
    assert committed_step() == 2
    experiences = [
        e
        for e in read_all(cfg, plan.experience_topic, f"check-{unique}")
        if isinstance(e, Experience)
    ]
    # A's step 1 and B's step 2; A's step-2 rollouts were never committed
    assert len(experiences) == 2 * per_step
    print(
        f"shared explorer id: B won; A exited {a_rc}: "
        + next(x for x in out_a.splitlines() if FENCE_LINE in x)
    )
