"""ProcessGroup: child processes started, watched and stopped together, with their memory and CPU
time sampled.

`rft run` starts the explorer and the trainer as separate OS processes (as a cluster would run
them) and must stop them all on Ctrl-C or when one fails. The group also samples the resident
memory of the whole process tree, so the run summary can report the peak of all processes
together, and the CPU time of each child's tree, so it can say how many cores each component
kept busy.
It is the `local` launcher's group (`rft.supervisor.launchers`), and each Ray actor of the `ray`
launcher runs its component in a group of one (`rft.supervisor.ray_host`).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from rft.supervisor.failure import Failure, exited, last_lines

log = logging.getLogger(__name__)

# Run in the child before it becomes the real command: the kernel kills it (SIGKILL) when the
# thread that started it exits, so a component never outlives a host that died without stopping
# it. The parent check closes the race of a parent that died before prctl ran. A Ray worker blocks
# SIGINT, and a blocked or ignored signal stays so across exec: the component would miss the
# SIGINT that asks it to stop between steps. Linux only.
_PR_SET_PDEATHSIG = 1
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    f"ctypes.CDLL(None, use_errno=True).prctl({_PR_SET_PDEATHSIG}, signal.SIGKILL)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(137)\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def descendants(root: psutil.Process) -> list[psutil.Process]:
    """`root` and its descendants; none when `root` is gone (it may exit and be reaped after it
    was looked up: `children()` then raises NoSuchProcess)."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


@dataclass
class Child:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path | None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()


@dataclass
class ProcessGroup:
    log_dir: Path | None = None
    children: list[Child] = field(default_factory=list)
    peak_rss_bytes: int = 0
    # child name -> the most CPU time (user + system) its tree was seen to have used; a
    # descendant its parent waited for counts in the parent's children's times (psutil's
    # children_user / children_system), so a vLLM engine's exited workers still count
    _cpu: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # guards the two above
    _sampler: threading.Thread | None = None
    _stop_sampling: threading.Event = field(default_factory=threading.Event)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        env: dict[str, str] | None = None,
        *,
        cwd: str | None = None,
        die_with_parent: bool = False,
        replace_env: bool = False,
    ) -> Child:
        """Start `argv` (its output appended to `<log_dir>/<name>.log`).

        `env` adds to this process's environment, or is the whole environment with
        `replace_env`. `die_with_parent` (Linux) has the kernel kill the child when the thread
        that started it exits.
        """
        log_path = None
        stdout: int | object = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.log_dir / f"{name}.log"
            stdout = log_path.open("ab")
        args = list(argv)
        if die_with_parent and sys.platform.startswith("linux"):
            args = [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *args]
        popen = subprocess.Popen(  # noqa: S603 - argv is built by us, not a shell string
            args,
            stdout=stdout,  # type: ignore[arg-type]
            stderr=subprocess.STDOUT if stdout is not None else None,
            env=dict(env or {}) if replace_env else {**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,  # Ctrl-C reaches only us; we stop children in order
        )
        child = Child(name, popen, log_path)
        self.children.append(child)
        log.info("started %s (pid %d)%s", name, popen.pid, f", log {log_path}" if log_path else "")
        if self._sampler is None:
            self._sampler = threading.Thread(target=self._sample, daemon=True)
            self._sampler.start()
        return child

    def tree_rss(self) -> int:
        """Resident memory of this process and every child tree, now (children that exit while
        it is measured count as nothing)."""
        return self.sample()[0]

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) each child's process tree has used so far, by child name,
        as of the last sample (every 0.5 s while the group runs, and now)."""
        return self.sample()[1]

    def sample(self) -> tuple[int, dict[str, float]]:
        """One walk over the trees, now: the resident memory of this process and every child
        tree, and the CPU time each child's tree has used, both recorded (`peak_rss_bytes`,
        `cpu_seconds`). A tree's CPU time is each live process's own plus what the descendants
        it waited for used (a process is either live or in its parent's count, never both); it
        only grows, so the most seen is kept, and the last sample stands for a child that has
        exited."""
        rss = psutil.Process().memory_info().rss
        cpu: dict[str, float] = {}
        for child, tree in self._child_trees():
            used = 0.0
            for proc in tree:
                try:
                    with proc.oneshot():
                        rss += proc.memory_info().rss
                        t = proc.cpu_times()
                except psutil.Error:  # exited meanwhile; counts as nothing now
                    continue
                used += t.user + t.system + t.children_user + t.children_system
            cpu[child.name] = used
        with self._lock:  # the sampler and a caller's tree_rss() / cpu_seconds() both record
            self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
            for name, used in cpu.items():
                self._cpu[name] = max(self._cpu.get(name, 0.0), used)
            return rss, dict(self._cpu)

    def _child_trees(self) -> Iterator[tuple[Child, list[psutil.Process]]]:
        """Each child with its process tree, now (an empty one for a child that is gone)."""
        for child in self.children:
            try:
                yield child, descendants(psutil.Process(child.popen.pid))
            except psutil.Error:
                yield child, []

    def _sample(self) -> None:
        while not self._stop_sampling.wait(0.5):
            try:
                self.sample()
            except psutil.Error as exc:  # one sample lost; the peak goes on being tracked
                log.debug("memory and CPU sample skipped: %s", exc)

    def failed(self) -> list[Child]:
        return [c for c in self.children if c.returncode not in (None, 0)]

    def running(self) -> list[Child]:
        return [c for c in self.children if c.returncode is None]

    # -- the launcher's view (rft.supervisor.launchers.LaunchedGroup)

    def alive(self) -> bool:
        return bool(self.running())

    def failures(self) -> list[Failure]:
        return [
            Failure(
                c.name,
                exited(code),
                str(c.log_path) if c.log_path else "(not captured)",
                last_lines(c.log_path),
            )
            for c in self.children
            if (code := c.returncode) not in (None, 0)
        ]

    def exit_codes(self) -> dict[str, int | None]:
        return {c.name: c.returncode for c in self.children}

    def wait(self, poll_s: float = 0.5) -> None:
        """Block until every child exits, or one fails (then stop the rest)."""
        while self.running():
            if self.failed():
                self.stop()
                return
            time.sleep(poll_s)

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGINT first (children flush and commit), then SIGTERM, then SIGKILL."""
        for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            alive = self.running()
            if not alive:
                break
            for child in alive:
                try:
                    os.killpg(child.popen.pid, sig)
                except ProcessLookupError:
                    continue
            deadline = time.monotonic() + wait_s
            while self.running() and time.monotonic() < deadline:
                time.sleep(0.2)
        self._stop_sampling.set()
