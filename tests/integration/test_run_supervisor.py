"""`rft run` in mode both: one command runs publisher, explorer and trainer processes and shuts
them all down cleanly on Ctrl-C (SIGINT) — no orphan process keeps training."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from rft.config.connections import StackSettings
from rft.stack import LocalStack
from tests.conftest import EXTERNAL_STACK_ENV
from tests.integration.test_rft_loop import run_config

pytestmark = pytest.mark.integration


def test_ctrl_c_stops_explorer_and_trainer(stack: StackSettings, unique: str, tmp_path: Path):
    raw = run_config(stack, unique, tmp_path)
    raw["buffer"]["total_steps"] = 1000  # far more than we let it run
    raw["buffer"]["explorer_input"]["taskset"]["generator_args"]["num_tasks"] = 4000
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rft.cli.main", "run", "--config", str(config_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    deadline = time.monotonic() + 300
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "[ trainer step    2]" in line:
            break
    else:
        proc.kill()
        pytest.fail("no trainer step within 300s:\n" + "".join(lines[-30:]))
    children = psutil.Process(proc.pid).children(recursive=True)
    assert {"explore", "train"} <= {c.cmdline()[3] for c in children if len(c.cmdline()) > 3}
    if not any(os.environ.get(name) for name in EXTERNAL_STACK_ENV):
        # a test session that started the local stack must not stop it under a running `rft run`
        assert (LocalStack().layout.leases / str(proc.pid)).exists()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(lines[-20:]) + out
    assert "stopping explorer and trainer" in out
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[p.pid for p in alive]}"
