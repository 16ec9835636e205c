"""Pid files, ownership checks and stopping, with real child processes (`sleep`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rft.errors import StackError
from rft.stack.detached_process import is_exited, start_detached, stop_process
from rft.stack.pid_file import PidFile, PidRecord, process_matches
from rft.stack.stack_lease import StackLease


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[PidRecord]:
    marker = str(tmp_path / "marker-arg")
    record = start_detached(
        [sys.executable, "-c", "import time; time.sleep(60)", marker],
        tmp_path / "out.log",
        dict(os.environ),
        cwd=tmp_path,
        marker=marker,
    )
    for _ in range(200):  # /proc/<pid>/cmdline is empty for a moment after exec
        if psutil.Process(record.pid).cmdline():
            break
        time.sleep(0.01)
    yield record
    stop_process(record, timeout_s=5)


def test_record_round_trips(tmp_path: Path) -> None:
    pid_file = PidFile(tmp_path / "run" / "kafka.pid")
    assert pid_file.read() is None
    record = PidRecord(pid=123, create_time=1.5, marker="/root/config/server.properties")
    pid_file.write(record)
    assert pid_file.read() == record
    pid_file.remove()
    assert pid_file.read() is None


def test_malformed_pid_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "kafka.pid"
    path.write_text("12345\n")
    with pytest.raises(StackError, match=str(path)):
        PidFile(path).read()


def test_a_started_process_is_recognised_as_ours(sleeper: PidRecord, tmp_path: Path) -> None:
    assert process_matches(sleeper)
    pid_file = PidFile(tmp_path / "s.pid")
    pid_file.write(sleeper)
    assert pid_file.live_record() == sleeper


def test_a_pid_whose_command_line_lacks_the_marker_is_not_ours(sleeper: PidRecord) -> None:
    assert not process_matches(PidRecord(sleeper.pid, sleeper.create_time, "/other/root/marker"))


def test_a_reused_pid_is_not_ours(sleeper: PidRecord) -> None:
    assert not process_matches(PidRecord(sleeper.pid, sleeper.create_time - 3600, sleeper.marker))


def test_a_stale_pid_file_is_removed_and_the_process_left_alone(
    sleeper: PidRecord, tmp_path: Path
) -> None:
    pid_file = PidFile(tmp_path / "s.pid")
    pid_file.write(PidRecord(sleeper.pid, sleeper.create_time, "/not/in/its/cmdline"))
    assert pid_file.live_record() is None
    assert not pid_file.path.exists()
    assert not is_exited(sleeper)  # still running: a foreign process is never signalled


def test_stop_ends_the_process_and_reaps_it(sleeper: PidRecord) -> None:
    stop_process(sleeper, timeout_s=5)
    assert is_exited(sleeper)


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    marker = str(tmp_path / "stubborn")
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    log = tmp_path / "out.log"
    record = start_detached(
        [sys.executable, "-c", code, marker], log, dict(os.environ), cwd=tmp_path, marker=marker
    )
    for _ in range(400):  # the SIGTERM handler must be installed before the test signals
        if "ready" in log.read_text():
            break
        time.sleep(0.05)
    stop_process(record, timeout_s=0.5)
    assert is_exited(record)


def test_a_missing_program_is_a_stack_error(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="could not start"):
        start_detached(
            [str(tmp_path / "no-such-binary")], tmp_path / "o.log", {}, cwd=tmp_path, marker="x"
        )


def test_leases_count_other_live_processes_only(tmp_path: Path) -> None:
    leases = tmp_path / "leases"
    mine = StackLease(leases).acquire()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        StackLease(leases, pid=other.pid).acquire()
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        StackLease(leases, pid=dead.pid).acquire()
        assert mine.others_alive() == (other.pid,)
        assert not (leases / str(dead.pid)).exists()
    finally:
        other.kill()
        other.wait()
    assert mine.others_alive() == ()
    mine.release()
    assert not mine.path.exists()
