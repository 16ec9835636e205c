"""What `rft run` says about a component that ended the run: its name, what happened to it, and
the last lines of its log (read from the file here, or sent by the Ray actor that hosted it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rft.errors import FENCED_EXIT_CODE

TAIL_LINES = 20
_TAIL_BYTES = 16_384  # enough for TAIL_LINES of ordinary log lines; a log can be gigabytes


@dataclass
class Failure:
    """A component that ended the run badly."""

    name: str
    what: str  # "exited with 1", "lost its Ray actor: ..."
    log: str  # where its log is (a path; `node:path` for a process on another machine)
    last_lines: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        head = f"rft run: {self.name} {self.what}; log {self.log}"
        if not self.last_lines:
            return [head]
        return [f"{head}; its last lines:", *(f"  | {line}" for line in self.last_lines)]


def exited(code: int) -> str:
    """What a component's non-zero exit status says; a fenced one is not restarted by anyone."""
    if code == FENCED_EXIT_CODE:
        return f"exited with {code}: fenced (another process took over its role; not restarted)"
    return f"exited with {code}"


def last_lines(path: Path | None, n: int = TAIL_LINES) -> list[str]:
    """Up to `n` last lines of `path` (decoded leniently); none when it cannot be read."""
    if path is None:
        return []
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > _TAIL_BYTES and lines:
        lines = lines[1:]  # the first one is cut
    return lines[-n:]
