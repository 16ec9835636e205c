"""Pid files of the processes `rft stack up` started, and the check that a pid is still ours.

A pid alone can be reused by the OS after a crash, so a record also keeps the process start time
and a marker that must appear in its command line; `down` stops a process only if all three match.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from rft.errors import StackError

# start times read back through psutil can differ from the recorded ones by rounding
_CREATE_TIME_SLACK_S = 1.0


@dataclass(frozen=True)
class PidRecord:
    pid: int
    create_time: float
    marker: str  # a token of the command line, e.g. the path of the rendered config

    @classmethod
    def for_process(cls, pid: int, marker: str) -> PidRecord:
        try:
            return cls(pid=pid, create_time=psutil.Process(pid).create_time(), marker=marker)
        except psutil.Error as exc:
            raise StackError(f"process {pid} vanished before its pid file was written") from exc


def process_alive(record: PidRecord) -> bool:
    """True when the recorded process still exists and is not a zombie (same pid, same start)."""
    try:
        proc = psutil.Process(record.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(proc.create_time() - record.create_time) <= _CREATE_TIME_SLACK_S
    except psutil.Error:
        return False


def process_matches(record: PidRecord) -> bool:
    """True when `record.pid` is alive and is the process the record describes."""
    if not process_alive(record):
        return False
    try:
        cmdline = psutil.Process(record.pid).cmdline()
    except psutil.Error:
        return False
    # /proc/<pid>/cmdline reads empty for a moment while a freshly exec'd binary sets up; the
    # matching start time already rules out pid reuse then
    return not cmdline or record.marker in cmdline


class PidFile:
    """One JSON pid record at a fixed path; written atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, record: PidRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(record)) + "\n")
        os.replace(tmp, self.path)

    def read(self) -> PidRecord | None:
        """The record, or None when there is no file; a malformed file is an error naming it."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        try:
            raw = json.loads(text)
            return PidRecord(
                pid=int(raw["pid"]),
                create_time=float(raw["create_time"]),
                marker=str(raw["marker"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StackError(
                f"{self.path}: not a pid record ({exc}); remove it if no stack process is running"
            ) from exc

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def live_record(self) -> PidRecord | None:
        """The record if its process is still ours; a stale file is removed."""
        record = self.read()
        if record is None:
            return None
        if process_matches(record):
            return record
        self.remove()
        return None
