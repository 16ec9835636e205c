"""What the stack needs from each of its servers, and the status a server reports.

`LocalStack` drives every server through this one protocol, so adding a server to the stack
means writing one class, not another branch in `up`/`down`/`status`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    running: bool  # a process this stack started is alive
    healthy: bool  # and it answers its health probe
    pid: int | None
    endpoint: str
    detail: str
    log_path: Path

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "running": self.running,
            "healthy": self.healthy,
            "pid": self.pid,
            "endpoint": self.endpoint,
            "detail": self.detail,
            "log": str(self.log_path),
        }


class StackService(Protocol):
    name: str

    @property
    def ports(self) -> tuple[int, ...]: ...

    @property
    def log_path(self) -> Path: ...

    def log_paths(self) -> tuple[Path, ...]: ...

    def provision(self) -> None:
        """Download or build what the server needs (cached after the first time)."""
        ...

    def is_running(self) -> bool: ...

    def start(self) -> None: ...

    def has_exited(self) -> bool:
        """True once a process started by `start` is gone (crashed on start-up)."""
        ...

    def probe(self) -> tuple[bool, str]: ...

    def stop(self, timeout_s: float) -> bool:
        """Stop the server if this stack started it; True if something was stopped."""
        ...

    def status(self) -> ServiceStatus: ...
