"""Start a server process detached from the caller, and stop it again.

Detached means a new session with stdin closed and output appended to a log file, so the server
outlives `rft stack up` and a Ctrl-C in the terminal does not reach it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from rft.errors import StackError
from rft.stack.pid_file import PidRecord, process_alive


def start_detached(
    argv: Sequence[str], log_path: Path, env: Mapping[str, str], cwd: Path, marker: str
) -> PidRecord:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise StackError(f"could not start {argv[0]}: {exc}") from exc
    return PidRecord.for_process(proc.pid, marker)


def _reap(pid: int) -> None:
    # when the server is our own child (tests, one CLI process doing up and down) it stays a
    # zombie until waited for; elsewhere it was re-parented and this is a no-op
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def is_exited(record: PidRecord) -> bool:
    _reap(record.pid)
    return not process_alive(record)


def stop_process(record: PidRecord, timeout_s: float) -> None:
    """SIGTERM the process (and its session), then SIGKILL if it outlives `timeout_s`."""
    if is_exited(record):
        return
    try:
        psutil.Process(record.pid).send_signal(signal.SIGTERM)
    except psutil.Error:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if is_exited(record):
            return
        time.sleep(0.1)
    try:
        psutil.Process(record.pid).send_signal(signal.SIGKILL)
    except psutil.Error:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if is_exited(record):
            return
        time.sleep(0.1)
    raise StackError(f"process {record.pid} survived SIGKILL")
