"""ComponentHost, the body of the ray launcher's actors, driven without Ray: it runs the real
`rft` command line of its component, ships the config to a node that lacks it, reports the end of
the log, stops its component with SIGINT even from a thread that blocks SIGINT (as Ray workers
do), and its component dies with it."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from rft.supervisor.process_group import ProcessGroup
from rft.supervisor.ray_host import ChildSpec, ComponentHost

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")

# exits 7 on SIGINT, once it has said it is ready
SIGINT_AWARE = [
    sys.executable,
    "-c",
    "import signal, sys, time\n"
    "signal.signal(signal.SIGINT, lambda *a: sys.exit(7))\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(0.05)\n",
]


def test_a_component_with_a_bad_config_fails_with_its_error_in_the_last_lines(
    tmp_path: Path,
) -> None:
    elsewhere = (tmp_path / "unused").as_posix()  # a path this "node" lacks
    config_text = "project: p\nname: n\nalgorithm:\n  repeat_times: 0\n"
    host = ComponentHost("explorer")
    host.start(
        ChildSpec(
            verb="explore",
            config_path=elsewhere,  # the host writes the text it was sent instead
            config_text=config_text,
            overrides=("model.model_path=tiny",),
            cwd=str(tmp_path / "missing-dir"),  # nor this: the host's own cwd is used
            log_dir=str(tmp_path / "logs"),
        )
    )
    assert host.wait() == 1
    shipped = tmp_path / "logs" / "explorer.config.yaml"
    assert shipped.read_text() == config_text
    status = host.status()
    assert status.returncode == 1
    assert any("algorithm.repeat_times" in line for line in status.last_lines), status


def test_stop_reaches_the_component_with_sigint_although_the_host_blocks_it(
    tmp_path: Path,
) -> None:
    group = ProcessGroup(log_dir=tmp_path)
    started: list[int] = []

    def host_thread() -> None:  # a Ray worker runs actor methods with SIGINT blocked
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        started.append(group.start("c", SIGINT_AWARE, die_with_parent=True).popen.pid)
        time.sleep(30)  # the starting thread stays alive: its exit would kill the child

    threading.Thread(target=host_thread, daemon=True).start()
    deadline = time.monotonic() + 20
    while "ready" not in _read(tmp_path / "c.log") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started, "the child never started"
    group.stop(grace_s=15)
    assert group.children[0].returncode == 7  # its SIGINT handler, not SIGTERM after the grace


def test_the_component_dies_with_its_host(tmp_path: Path) -> None:
    host = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from rft.supervisor.process_group import ProcessGroup\n"
            f"child = ProcessGroup().start('c', {SIGINT_AWARE!r}, die_with_parent=True)\n"
            "print(child.popen.pid, flush=True)\n"
            "time.sleep(120)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert host.stdout is not None
    component = psutil.Process(int(host.stdout.readline()))
    assert component.cmdline()[:2] == SIGINT_AWARE[:2]  # the command itself after the exec
    host.kill()
    host.wait()
    gone, alive = psutil.wait_procs([component], timeout=10)
    assert not alive, "the component outlived its host"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
