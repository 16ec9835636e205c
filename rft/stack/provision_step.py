"""Run one long provisioning command (mvn, go install, tar) with its output kept in a log file.

The caller learns what is happening (one line before the step) and, on failure, gets the log path
and its last lines in the error instead of a bare exit code.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from rft.errors import StackError

log = logging.getLogger(__name__)


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def run_step(
    what: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str], cwd: Path | None = None
) -> None:
    log.info("%s (log: %s)", what, log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as out:
        try:
            rc = subprocess.run(
                list(argv), stdout=out, stderr=subprocess.STDOUT, env=dict(env), cwd=cwd
            ).returncode
        except OSError as exc:
            raise StackError(f"{what}: cannot run {argv[0]}: {exc}") from exc
    if rc != 0:
        raise StackError(
            f"{what} failed (exit {rc}); log {log_path}; last lines:\n{log_tail(log_path)}"
        )
