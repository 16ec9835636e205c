"""Are two math answers equal? math-verify decides, in a child process that a deadline can kill.

math-verify parses LaTeX and plain expressions into sympy objects and compares them (fractions,
decimals, sets, intervals, percentages, units). A pathological answer such as `9^{9^{9^{9}}}` can
keep sympy computing for hours, and math-verify's own timeout is a SIGALRM that only works on the
main thread of the main interpreter and is never seen while sympy sits in one long C call. So the
comparisons run in one long-lived child process (a fresh interpreter, safe beside the threads and
CUDA state of an explorer): the parent waits at most `timeout_s` for each answer, kills the child
when the deadline passes, and reports the comparison as timed out; the next comparison starts a
fresh child. Comparisons of one process are serialised through that child.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass
from typing import IO, Any

from rft.errors import RftError
from rft.registry import load_dotted

# how long a fresh child may take to import math-verify and sympy before it is given up
_START_TIMEOUT_S = 120.0


class EquivalenceWorkerError(RftError):
    """The comparison child could not be started, or died without an answer."""


@dataclass(frozen=True)
class Verdict:
    """One comparison: equal or not, what each side parsed to, and whether it ran out of time.

    `gold_parsed` / `answer_parsed` are math-verify's readings (empty when nothing parsed);
    `error` is what a comparison that raised said."""

    equal: bool
    gold_parsed: str = ""
    answer_parsed: str = ""
    timed_out: bool = False
    error: str = ""


def verified_equal(gold: str, answer: str) -> Verdict:
    """math-verify's verdict on `answer` against `gold` (both LaTeX/plain text), in this process
    and without a deadline: the child runs it."""
    import math_verify
    import math_verify.grader
    import math_verify.parser

    # the child enforces the deadline; math-verify's SIGALRM timeout stays off, and so its
    # warning that it is off, which would repeat in every fresh child
    math_verify.parser.TIMEOUT_WARNING_SHOWN = True
    math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    gold_parsed = math_verify.parse(gold, parsing_timeout=None)
    answer_parsed = math_verify.parse(answer, parsing_timeout=None)
    equal = bool(gold_parsed) and bool(answer_parsed)
    equal = equal and math_verify.verify(gold_parsed, answer_parsed, timeout_seconds=None)
    return Verdict(equal, _shown(gold_parsed), _shown(answer_parsed))


def _shown(parsed: list[Any]) -> str:
    # math-verify returns [sympy object, matched text]; the text is what a person can check
    return str(parsed[-1])[:200] if parsed else ""


def _serve(compare_target: str) -> None:
    """The child: one JSON request per stdin line, [gold, answer] -> one JSON verdict line."""
    compare = load_dotted(compare_target)
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        gold, answer = json.loads(line)
        try:
            verdict = compare(gold, answer)
        except Exception as exc:  # a comparison that raises is that comparison's verdict
            verdict = Verdict(False, error=f"{type(exc).__name__}: {exc}"[:200])
        print(json.dumps(asdict(verdict)), flush=True)


class EquivalenceWorker:
    """The child process that runs `compare_target` ("module:function" of (gold, answer) ->
    Verdict), with a deadline per comparison.

    The child is a fresh interpreter (`python -m rft.rewards.math_equivalence`) on this process's
    sys.path, talking JSON lines over its stdin/stdout: no fork of a process holding threads or
    CUDA state, and no re-import of the caller's main script as multiprocessing's spawn does."""

    def __init__(self, compare_target: str = "rft.rewards.math_equivalence:verified_equal") -> None:
        self.compare_target = compare_target
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self.restarts = 0  # children killed for overrunning their deadline

    def compare(self, gold: str, answer: str, timeout_s: float) -> Verdict:
        """The verdict on `answer` against `gold`, or Verdict(False, timed_out=True) when the
        child has not answered within `timeout_s` seconds (the child is then killed)."""
        with self._lock:
            process = self._started()
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps([gold, answer]) + "\n")
            process.stdin.flush()
            if not _readable(process.stdout, timeout_s):
                self._stop()
                self.restarts += 1
                return Verdict(False, timed_out=True)
            line = process.stdout.readline()
            if not line:
                self._stop()
                raise EquivalenceWorkerError(
                    f"the math-verify child ({self.compare_target}) died while comparing "
                    f"{answer[:80]!r} with {gold[:80]!r}"
                )
        return Verdict(**json.loads(line))

    def _started(self) -> subprocess.Popen[str]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._stop()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        process = subprocess.Popen(
            [sys.executable, "-m", "rft.rewards.math_equivalence", self.compare_target],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert process.stdout is not None
        if not _readable(process.stdout, _START_TIMEOUT_S) or process.stdout.readline() == "":
            process.kill()
            process.wait()
            raise EquivalenceWorkerError(
                f"the math-verify child ({self.compare_target}) did not start within "
                f"{_START_TIMEOUT_S:.0f}s (its stderr says why)"
            )
        self._process = process
        return process

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                if stream is not None:
                    stream.close()
        self._process = None

    def close(self) -> None:
        with self._lock:
            self._stop()


def _readable(stream: IO[str], timeout_s: float) -> bool:
    ready, _, _ = select.select([stream], [], [], timeout_s)
    return bool(ready)


_SHARED: EquivalenceWorker | None = None
_SHARED_LOCK = threading.Lock()


def shared_worker() -> EquivalenceWorker:
    """This process's one math-verify child, started on first use and stopped at exit."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = EquivalenceWorker()
            atexit.register(_SHARED.close)
        return _SHARED


if __name__ == "__main__":
    _serve(sys.argv[1])
