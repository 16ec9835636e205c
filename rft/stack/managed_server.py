"""The part every stack server shares: a detached process tracked by a pid file under the root.

Subclasses say how to provision, which command line to run, and how to probe health; this class
starts the process once, recognises it again on the next call, and stops only that process.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path

from rft.stack.detached_process import is_exited, start_detached, stop_process
from rft.stack.layout import StackLayout
from rft.stack.pid_file import PidFile, PidRecord
from rft.stack.service import ServiceStatus


class ManagedServer(ABC):
    name: str
    # an optional server starts only when named (`up(services=...)`, `rft stack up --with`)
    optional: bool = False

    def __init__(self, layout: StackLayout) -> None:
        self.layout = layout
        self.pid_file = PidFile(layout.pid_file(self.name))
        self._started: PidRecord | None = None

    @property
    def log_path(self) -> Path:
        return self.layout.logs / f"{self.name}.out"

    def log_paths(self) -> tuple[Path, ...]:
        """Where to look when the server misbehaves, most telling last."""
        return (self.log_path,)

    @property
    @abstractmethod
    def ports(self) -> tuple[int, ...]: ...

    @property
    @abstractmethod
    def endpoint(self) -> str: ...

    @abstractmethod
    def provision(self) -> None: ...

    @abstractmethod
    def command(self) -> tuple[Sequence[str], Mapping[str, str], str]:
        """(argv, extra environment, marker): the marker is one argv element that identifies
        this stack's process (a path under the root) when the pid is checked later."""

    @abstractmethod
    def probe(self) -> tuple[bool, str]: ...

    def prepare(self) -> None:
        """Hook run before each start (render configs, format storage)."""
        return None

    def is_running(self) -> bool:
        return self.pid_file.live_record() is not None

    def start(self) -> None:
        self.prepare()
        argv, extra_env, marker = self.command()
        env = {**os.environ, **extra_env}
        record = start_detached(argv, self.log_path, env, cwd=self.layout.root, marker=marker)
        self.pid_file.write(record)
        self._started = record

    def has_exited(self) -> bool:
        record = self._started or self.pid_file.read()
        return record is None or is_exited(record)

    def stop(self, timeout_s: float) -> bool:
        record = self.pid_file.live_record()
        if record is None:
            return False
        stop_process(record, timeout_s)
        self.pid_file.remove()
        return True

    def status(self) -> ServiceStatus:
        record = self.pid_file.live_record()
        if record is None:
            return ServiceStatus(
                self.name, False, False, None, self.endpoint, "not running", self.log_paths()[-1]
            )
        healthy, detail = self.probe()
        return ServiceStatus(
            self.name, True, healthy, record.pid, self.endpoint, detail, self.log_paths()[-1]
        )
