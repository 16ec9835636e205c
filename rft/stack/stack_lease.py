"""Leases that let several processes share one running stack (parallel test sessions).

Each user holds a lease file named after its pid under `<root>/leases`. The process that started
the stack stops it only when no other live process still holds a lease; leases of dead processes
do not count and are cleaned up.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil


class StackLease:
    def __init__(self, leases_dir: Path, pid: int | None = None) -> None:
        self.leases_dir = leases_dir
        self.pid = os.getpid() if pid is None else pid
        self.path = leases_dir / str(self.pid)

    def acquire(self) -> StackLease:
        self.leases_dir.mkdir(parents=True, exist_ok=True)
        self.path.write_text(f"{self.pid}\n")
        return self

    def release(self) -> None:
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> StackLease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def others_alive(self) -> tuple[int, ...]:
        """Pids of other live lease holders; removes leases whose process is gone."""
        alive = []
        if not self.leases_dir.is_dir():
            return ()
        for lease in self.leases_dir.iterdir():
            if not lease.name.isdigit() or int(lease.name) == self.pid:
                continue
            pid = int(lease.name)
            if psutil.pid_exists(pid):
                alive.append(pid)
            else:
                lease.unlink(missing_ok=True)
        return tuple(sorted(alive))
