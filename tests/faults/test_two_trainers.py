"""Two trainers on one run: the newcomer fences the first, which publishes nothing afterwards.

Trainer A trains the first experiences and publishes v1 and v2, then is stopped (SIGSTOP).
Trainer B starts on the same run: its transactional producer's epoch bump fences A, and it
resumes from v2. A is continued (SIGCONT) and both are live in one consumer group when the
explorer writes the rest of the experiences. A trains a batch of its partitions and its first
transaction fails: it exits non-zero with the fence line. B trains every remaining step.

The proof reads what was written: every WeightVersion on the weights topic (read_committed) and
every manifest in the checkpoint store, each manifest naming the process that committed it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rft.config.connections import StackSettings
from rft.errors import FENCED_EXIT_CODE
from rft.events.models import WeightVersion
from tests.integration.test_rft_loop import published_run, read_all

# multi-process fault runs: in `make test-faults` (and `make test-all`), kept out of `make test`
pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.slow]

TOTAL_STEPS = 8  # 16 tasks, 2 per step
FIRST_STEPS = 2  # what A trains before B starts
FENCE_LINE = "rft train: error: fenced: another process started with transactional id"


def rft(verb: str, config: Path, *overrides: str) -> list[str]:
    argv = [sys.executable, "-m", "rft.cli.main", verb, "--config", str(config)]
    for item in overrides:
        argv += ["--override", item]
    return argv


def explore(config: Path, steps: int) -> None:
    done = subprocess.run(
        rft("explore", config, f"buffer.total_steps={steps}"),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def start_trainer(config: Path, log: Path) -> subprocess.Popen[str]:
    argv = rft("train", config, f"buffer.total_steps={TOTAL_STEPS}")
    with log.open("w") as out:
        return subprocess.Popen(
            [*argv, "--idle-timeout", "90"], stdout=out, stderr=subprocess.STDOUT, text=True
        )


def wait_for(what: str, holds: Callable[[], bool], timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not holds():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.5)


def test_newcomer_fences_the_first_trainer_which_publishes_nothing_after(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config, cfg, plan = published_run(stack, unique, tmp_path, "trainer_driven", 1)
    store = plan.checkpoint_store()
    explore(config, FIRST_STEPS)

    log_a, log_b = tmp_path / "trainer-a.log", tmp_path / "trainer-b.log"
    a = start_trainer(config, log_a)
    b: subprocess.Popen[str] | None = None
    try:
        wait_for(
            f"trainer A to publish v{FIRST_STEPS}", lambda: FIRST_STEPS in store.list_versions()
        )
        os.kill(a.pid, signal.SIGSTOP)
        b = start_trainer(config, log_b)
        wait_for(
            f"trainer B to claim the run and resume from v{FIRST_STEPS}",
            lambda: f"resumed from checkpoint v{FIRST_STEPS}" in log_b.read_text(),
        )
        os.kill(a.pid, signal.SIGCONT)
        explore(config, TOTAL_STEPS)
        a_rc = a.wait(timeout=300)
        b_rc = b.wait(timeout=300)
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()
    out_a, out_b = log_a.read_text(), log_b.read_text()

    # the loser: A exits with the fenced status (no supervisor restarts it) and the fence line
    assert a_rc == FENCED_EXIT_CODE, out_a[-3000:]
    assert FENCE_LINE in out_a, out_a[-3000:]
    # the winner: B, the newcomer, trains every remaining step and exits cleanly
    assert b_rc == 0, out_b[-3000:]
    summary_b = json.loads(out_b.strip().splitlines()[-1])
    assert summary_b["published_versions"] == list(range(FIRST_STEPS + 1, TOTAL_STEPS + 1))

    # the object store: one manifest per version; A committed v1..v2 and nothing after
    writers = {v: store.read_manifest(v).extra["writer"] for v in store.list_versions()}
    assert sorted(writers) == list(range(1, TOTAL_STEPS + 1))
    a_id, b_id = (writers[1], writers[TOTAL_STEPS])
    assert a_id.endswith(f":{a.pid}") and b_id.endswith(f":{b.pid}")
    assert {v for v, w in writers.items() if w == a_id} == set(range(1, FIRST_STEPS + 1))
    assert {v for v, w in writers.items() if w == b_id} == set(
        range(FIRST_STEPS + 1, TOTAL_STEPS + 1)
    )

    # the weights topic: each version announced once, each announcement that of its manifest
    announced = [
        e
        for e in read_all(cfg, plan.topics.weights, f"check-{unique}")
        if isinstance(e, WeightVersion)
    ]
    assert sorted(e.version for e in announced) == list(range(1, TOTAL_STEPS + 1))
    for event in announced:
        manifest = store.read_manifest(event.version)
        assert {(m.name, m.sha256) for m in event.manifest} == {
            (f.name, f.sha256) for f in manifest.files
        }
    # and A's own log: it published nothing after v2, and met the fence in a transaction
    assert f"published weight version {FIRST_STEPS + 1}" not in out_a
    print(
        f"two trainers: B (pid {b.pid}, the newcomer) won and published "
        f"v{FIRST_STEPS + 1}..v{TOTAL_STEPS}; A (pid {a.pid}) published v1..v{FIRST_STEPS}, "
        f"was fenced, exit code {a_rc}: {next(x for x in out_a.splitlines() if FENCE_LINE in x)}"
    )
