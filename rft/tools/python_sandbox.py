"""Running a model's Python program in a fenced subprocess: `run_python(code, limits, isolation)`.

Each run gets its own temporary directory (removed afterwards) as its only writable place: the
launcher (rft/tools/sandbox_launcher.py) enters new network and mount namespaces, so the program
sees no network (no interface but a downed loopback) and a read-only file system elsewhere, and
it holds no capability to undo that, even as root. Limits: CPU seconds and address space
(RLIMIT_CPU, RLIMIT_AS), size of any file written, wall-clock time and output size. Each run is a
fresh session: at the wall-clock or output limit the whole process group is SIGKILLed, and after a
normal exit too, so a background child does not outlive its run. Output (stdout and stderr
interleaved) is captured up to the limit and the rest is never buffered.

Not bounded: the number of processes (RLIMIT_NPROC does not bind root, and cgroups are not used),
and a child that calls setsid() leaves the process group (it still has no network and cannot write
outside its directory, which is removed).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

LAUNCHER = Path(__file__).with_name("sandbox_launcher.py")
FENCE_FAILED = 97  # the launcher's exit status when a limit or the namespace cannot be set
ISOLATIONS = ("net", "user-net")
_ESCAPE_GRACE_S = 1.0


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits: CPU seconds, address space (MiB), size of any file written (MiB), wall-clock
    seconds, and bytes of output kept."""

    cpu_s: int = 5
    memory_mb: int = 1024
    file_mb: int = 16
    wall_s: float = 10.0
    output_bytes: int = 4_000


@dataclass(frozen=True)
class PythonRun:
    """What one run produced. `stopped` says why it was killed: "wall", "output" or "" (it ended);
    a CPU-limit kill shows as `signal` SIGXCPU or SIGKILL."""

    output: str
    exit_code: int | None
    signal: str
    stopped: str
    output_truncated: bool
    isolation: str
    limits: SandboxLimits

    @property
    def outcome(self) -> str:
        """The tool outcome of the run: "timeout" at the wall-clock or CPU limit, "truncated" at
        the output limit, else "ok" (a program that fails still ran: its traceback is the result)."""
        if self.stopped == "output":
            return "truncated"
        if self.stopped == "wall" or self.signal in ("SIGXCPU", "SIGKILL"):
            return "timeout"
        return "ok"

    def report(self) -> str:
        """The text the model reads: the output, then one line on how the run ended if not cleanly."""
        limits = self.limits
        parts = [self.output if self.output else "(no output)"]
        if self.stopped == "output":
            parts.append(
                f"[output limit of {limits.output_bytes} bytes reached; the rest was discarded "
                "and the program was stopped]"
            )
        elif self.stopped == "wall":
            parts.append(f"[stopped: the wall-clock limit of {limits.wall_s:g} s was reached]")
        elif self.signal in ("SIGXCPU", "SIGKILL"):
            parts.append(f"[stopped: the CPU-time limit of {limits.cpu_s} s was reached]")
        elif self.signal:
            parts.append(f"[terminated by {self.signal}]")
        elif self.exit_code:
            parts.append(f"[exit code {self.exit_code}]")
        return "\n".join(parts)


def run_python(code: str, limits: SandboxLimits, isolation: str) -> PythonRun:
    """Run `code` under `limits`, fenced by `isolation` (one of ISOLATIONS; rft.tools.sandbox_support
    says which works here). A fence that cannot be set ends the run with exit status FENCE_FAILED."""
    workdir = Path(tempfile.mkdtemp(prefix="rft-python-"))
    try:
        script = workdir / "main.py"
        script.write_text(code, encoding="utf-8")
        return _run_fenced(script, workdir, limits, isolation)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run_fenced(script: Path, workdir: Path, limits: SandboxLimits, isolation: str) -> PythonRun:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }
    argv = [sys.executable, "-I", str(LAUNCHER), json.dumps(asdict(limits)), isolation, "main.py"]
    proc = subprocess.Popen(
        argv,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    kept = bytearray()
    stopped = ""
    deadline = time.monotonic() + limits.wall_s
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline and not stopped:
                stopped = "wall"
                _kill_group(proc.pid)
            if now >= deadline + _ESCAPE_GRACE_S:
                break  # a process that left the group (setsid) still holds the pipe
            if not selector.select(timeout=max(0.05, min(deadline - now, 0.5))):
                if proc.poll() is not None:
                    _kill_group(proc.pid)  # the program ended: its leftovers hold the pipe open
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            if stopped:
                continue
            room = limits.output_bytes - len(kept)
            kept += chunk[:room]
            if len(chunk) > room:
                stopped = "output"
                _kill_group(proc.pid)
        if not stopped:
            _wait_until(proc, deadline)  # it may have closed its output and run on
            if proc.returncode is None:
                stopped = "wall"
    _kill_group(proc.pid)
    proc.wait()
    proc.stdout.close()
    code = proc.returncode
    return PythonRun(
        output=kept.decode("utf-8", errors="replace"),
        exit_code=code if code >= 0 else None,
        signal=_signal_name(-code) if code < 0 else "",
        stopped=stopped,
        output_truncated=stopped == "output",
        isolation=isolation,
        limits=limits,
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _wait_until(proc: subprocess.Popen[bytes], deadline: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
