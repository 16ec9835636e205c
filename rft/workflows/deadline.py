"""Per-task time limits of a workflow (`explorer.max_timeout`) and how a failed attempt is told.

Generation is stopped at its deadline inside the engine (`SamplingParams.timeout_s`); a reward
function, which is user code that may hang, runs here in a worker thread that the caller stops
waiting for when the task's time is up.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import TypeVar

from rft.errors import RftError

T = TypeVar("T")


class WorkflowTimeoutError(RftError):
    """A task's workflow (generation or scoring) ran past `explorer.max_timeout`."""


class WorkflowFailedError(RftError):
    """A task's workflow raised on every attempt it was given."""


class CallTimedOut(Exception):
    """`call_with_timeout` stopped waiting; the call may still be running in its thread."""


_abandoned: list[threading.Thread] = []
_abandoned_lock = threading.Lock()


def call_with_timeout(fn: Callable[[], T], timeout_s: float | None, name: str = "call") -> T:
    """`fn()` in a daemon thread, waited for at most `timeout_s` seconds (None: run inline).

    Returns its value or re-raises its exception; raises CallTimedOut when the time is up.
    Python cannot stop a thread, so a call that overruns is abandoned: it keeps running until `fn`
    returns (holding whatever CPU and memory it uses), its result is dropped, and as a daemon it
    does not keep the process alive at exit. `abandoned_calls()` counts those still running.
    `fn` runs off the main thread, so a signal-based timeout inside it (signal.alarm) cannot work.
    """
    if timeout_s is None:
        return fn()
    if timeout_s <= 0:
        raise CallTimedOut(f"{name}: no time left")
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the waiting caller
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"rft-{name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        with _abandoned_lock:
            _abandoned.append(thread)
        raise CallTimedOut(f"{name} still running after {timeout_s:.3g} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def abandoned_calls() -> int:
    """How many calls abandoned by `call_with_timeout` are still running."""
    with _abandoned_lock:
        _abandoned[:] = [t for t in _abandoned if t.is_alive()]
        return len(_abandoned)


def describe_failure(exc: BaseException) -> str:
    """One line for a dead letter: the exception's class and message, and where it was raised."""
    if isinstance(exc, WorkflowTimeoutError):
        return str(exc)
    text = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (at {last.filename}:{last.lineno} in {last.name})"
    return text
