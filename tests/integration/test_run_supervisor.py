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


def start_long_run(stack: StackSettings, unique: str, tmp_path: Path) -> subprocess.Popen[str]:
    """`rft run` of far more steps than a test lets it run, its output piped."""
    raw = run_config(stack, unique, tmp_path)
    raw["buffer"]["total_steps"] = 1000
    raw["buffer"]["explorer_input"]["taskset"]["generator_args"]["num_tasks"] = 4000
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    return subprocess.Popen(
        [sys.executable, "-m", "rft.cli.main", "run", "--config", str(config_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_ctrl_c_stops_explorer_and_trainer(stack: StackSettings, unique: str, tmp_path: Path):
    proc = start_long_run(stack, unique, tmp_path)
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
    assert {"explore", "train"} <= {
        line[3] for line in (c.cmdline() for c in children) if len(line) > 3
    }
    if not any(os.environ.get(name) for name in EXTERNAL_STACK_ENV):
        # a test session that started the local stack must not stop it under a running `rft run`
        assert (LocalStack().layout.leases / str(proc.pid)).exists()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(lines[-20:]) + out
    assert "stopping explorer and trainer" in out
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[p.pid for p in alive]}"


def test_a_killed_rft_run_takes_its_explorer_and_trainer_with_it(
    stack: StackSettings, unique: str, tmp_path: Path
):
    """SIGKILL of `rft run` (no chance to stop anything) ends its components too: the kernel
    kills each one when the supervisor dies, instead of leaving them running unseen."""
    proc = start_long_run(stack, unique, tmp_path)
    components: list[psutil.Process] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            found = psutil.Process(proc.pid).children(recursive=True)
            verbs = {line[3] for line in (c.cmdline() for c in found) if len(line) > 3}
        except psutil.Error:
            continue
        if {"explore", "train"} <= verbs:
            components = found
            break
        time.sleep(0.2)
    if not components:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"rft run started no explorer and trainer (exit {proc.poll()}):\n{out[-3000:]}")
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    gone, alive = psutil.wait_procs(components, timeout=20)
    assert not alive, f"left running after rft run was killed: {[p.cmdline() for p in alive]}"
