"""The live progress line of `rft run`: step k of N, ETA, latest reward and eval accuracy.

`RunProgress` folds the run's Metric events into those numbers. `ProgressLine` shows them: on a
terminal as one line redrawn in place below the per-step lines (it is cleared before anything else
is printed and drawn again after), elsewhere as a plain line each time the step advances.

k is the step both sides have reached (the smaller of the explorer's and the trainer's): the run
is done when both reach N. The ETA is the steps left times the mean step time since the first
step (model loading and the first eval do not count), less the time the current step has run, so
it counts down between steps.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from typing import TextIO

from rft.consumers.replay.progress import format_eta
from rft.events.models import Metric

_CLEAR = "\r\x1b[K"


class RunProgress:
    def __init__(self, total_steps: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.total_steps = total_steps
        self._clock = clock
        self.explorer_step = 0
        self.trainer_step = 0
        self.reward: float | None = None
        self.eval_accuracy: float | None = None
        self._first: tuple[float, int] | None = None  # (when, step) k first became > 0
        self._advanced = 0.0  # when k last grew

    @property
    def step(self) -> int:
        return min(self.explorer_step, self.trainer_step)

    def write(self, metric: Metric) -> None:
        before = self.step
        v = metric.values
        if metric.component == "explorer":
            if "eval_accuracy" in v:
                self.eval_accuracy = v["eval_accuracy"]
            if "tasks" in v:  # a step metric, not an eval one
                self.explorer_step = max(self.explorer_step, metric.step)
                if "reward_mean" in v:
                    self.reward = v["reward_mean"]
        elif metric.component == "trainer" and "step_time_s" in v:
            self.trainer_step = max(self.trainer_step, metric.step)
        if self.step > before:
            self._advanced = self._clock()
            if self._first is None:
                self._first = (self._advanced, self.step)

    def eta_s(self) -> float:
        if self._first is None:
            return float("inf")
        since, first_step = self._first
        done = self.step - first_step
        if done <= 0 or self._advanced <= since:
            return float("inf")
        per_step = (self._advanced - since) / done
        running = self._clock() - self._advanced
        return max((self.total_steps - self.step) * per_step - running, 0.0)

    def text(self) -> str:
        parts = [
            f"step {self.step}/{self.total_steps} (explorer {self.explorer_step}, "
            f"trainer {self.trainer_step})",
            f"ETA {format_eta(self.eta_s())}",
            f"reward {'-' if self.reward is None else f'{self.reward:.3f}'}",
            f"eval accuracy {'-' if self.eval_accuracy is None else f'{self.eval_accuracy:.3f}'}",
        ]
        return " | ".join(parts)


class ProgressLine:
    """Shows a RunProgress on `stream`: redrawn in place on a terminal, plain lines otherwise."""

    def __init__(self, progress: RunProgress, stream: TextIO | None = None) -> None:
        self.progress = progress
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty()
        self._shown = False
        self._drawn = ""
        self._last_step = -1

    def clear(self) -> None:
        """Remove the live line, before other output goes to the stream."""
        if self.live and self._shown:
            self.stream.write(_CLEAR)
            self.stream.flush()
            self._shown = False

    def show(self) -> None:
        text = self.progress.text()
        if self.live:
            width = shutil.get_terminal_size((100, 24)).columns
            # a wrapped line could not be cleared with one carriage return
            text = text[: max(width - 1, 10)]
            if self._shown and text == self._drawn:
                return  # nothing changed: leave the terminal alone
            self.stream.write(_CLEAR + text)
            self.stream.flush()
            self._shown, self._drawn = True, text
        elif self.progress.step != self._last_step and self.progress.step > 0:
            self._last_step = self.progress.step
            print(f"rft run: {text}", file=self.stream, flush=True)
