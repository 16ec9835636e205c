"""The explorer's idle clock: only time spent polling without a task counts towards
`idle_timeout_s`; time spent waiting for a weight version between polls does not (a slow trainer
once ended a run with 992 tasks left: the explorer waited minutes for a version, rejoined its
group, polled empty once and judged the taskset exhausted)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from rft.consumers.explorer.explorer import Explorer


class _Sync:
    """before_step waits `wait_s` before the step it is told to, as a trainer-bound wait does."""

    def __init__(self, slow_step: int, wait_s: float) -> None:
        self.slow_step, self.wait_s = slow_step, wait_s

    def before_step(self, step: int, engine: Any, plain: Any) -> None:
        if step == self.slow_step:
            time.sleep(self.wait_s)


def _explorer(polls: list[list[str]], idle_timeout_s: float) -> tuple[Explorer, list[int]]:
    """An Explorer whose polls return `polls` in turn (then nothing) and whose steps succeed."""
    explorer: Any = Explorer.__new__(Explorer)  # the loop alone: no clients, no engine
    explorer.idle_timeout_s = idle_timeout_s
    explorer.plan = SimpleNamespace(
        total_steps=3, batch_size=1, explorer_group="g", topics=SimpleNamespace(tasks="p.n.tasks")
    )
    explorer.cfg = SimpleNamespace(explorer=SimpleNamespace(eval_interval=100))
    queue = list(polls)
    stepped: list[int] = []

    def poll(tasks: Any, stop: threading.Event) -> list[str]:
        if queue:
            return queue.pop(0)
        time.sleep(0.05)  # an empty poll takes its wait
        return []

    explorer._poll_batch = poll
    explorer._group_took_all = lambda: False
    explorer._step_work = lambda step, batch: step

    def step_once(work: int, io: Any) -> bool:
        stepped.append(work)
        return True

    explorer._explore_step = step_once
    explorer._evaluate = lambda *args: None
    return explorer, stepped


def _io(sync: _Sync) -> Any:
    status = SimpleNamespace(
        waits=lambda step: SimpleNamespace(still=lambda *a: None, over=lambda: None)
    )
    return SimpleNamespace(
        sync=sync, engine=None, plain=None, tasks=None, metrics=None, status=status
    )


def test_a_long_wait_for_weights_then_one_empty_poll_does_not_end_the_run() -> None:
    # step 2 waits 0.5 s for its weights (past the 0.3 s idle timeout), then one poll comes back
    # empty (a member rejoining its group) before the tasks flow again
    explorer, stepped = _explorer([["t1"], [], ["t2"], ["t3"]], idle_timeout_s=0.3)
    step, ran_out = explorer._explore(_io(_Sync(slow_step=2, wait_s=0.5)), 0, threading.Event())
    assert (step, ran_out, stepped) == (3, False, [1, 2, 3])


def test_polling_empty_past_the_timeout_still_ends_the_run() -> None:
    explorer, stepped = _explorer([["t1"]], idle_timeout_s=0.3)
    started = time.monotonic()
    step, ran_out = explorer._explore(_io(_Sync(slow_step=0, wait_s=0.0)), 0, threading.Event())
    assert (step, ran_out, stepped) == (1, True, [1])
    assert time.monotonic() - started >= 0.3  # it polled empty for the timeout, no less
