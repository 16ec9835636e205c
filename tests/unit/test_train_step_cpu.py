"""The step's CPU seconds beside its wall time: the calling thread's and the whole process's.

The engine here stands in for the model only: it spends the step spinning, sleeping, or waiting
while another thread spins, and the metrics must tell those apart (that is what they are for: a
step slower beside something else either waited or ran on a slower core)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rft.algorithms.objective import build_loss
from rft.algorithms.presets import resolve_algorithm
from rft.buffer.sampler import BatchRow, SampledBatch, SamplerCounters
from rft.consumers.trainer.train_step import StepTrainer
from tests.unit.experience_log import experience

STEP_S = 0.3


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class TimedEngine:
    """A trainer engine whose step is `work()`."""

    def __init__(self, work: Callable[[], None]) -> None:
        self.work = work

    def train_step(self, batch: Any, loss: Any, advantages: Any) -> dict[str, float]:
        self.work()
        return {}


def step_with(work: Callable[[], None]) -> dict[str, float]:
    spec = resolve_algorithm({"algorithm_type": "grpo", "kl_loss_fn": "none"})
    rows = [BatchRow(experience("g", 2, i, 0, float(i)), None) for i in range(2)]
    trainer = StepTrainer(spec, build_loss(spec), TimedEngine(work))  # type: ignore[arg-type]
    return trainer.train(SampledBatch(rows, 0, SamplerCounters()), 1)


def beside_a_spinner() -> None:
    spinner = threading.Thread(target=spin, args=(STEP_S,))
    spinner.start()
    spinner.join()


def test_a_step_that_computes_spends_its_wall_time_on_its_own_thread() -> None:
    values = step_with(lambda: spin(STEP_S))
    assert values["step_thread_cpu_s"] >= STEP_S * 0.9
    assert values["step_process_cpu_s"] >= values["step_thread_cpu_s"] * 0.99
    assert values["step_time_s"] >= values["step_thread_cpu_s"] * 0.99


def test_a_step_that_waits_spends_little_cpu() -> None:
    values = step_with(lambda: time.sleep(STEP_S))
    assert values["step_time_s"] >= STEP_S
    assert values["step_thread_cpu_s"] < STEP_S / 3
    assert values["step_process_cpu_s"] < STEP_S / 3


def test_another_threads_work_counts_for_the_process_not_the_step_thread() -> None:
    values = step_with(beside_a_spinner)
    assert values["step_thread_cpu_s"] < STEP_S / 3
    assert values["step_process_cpu_s"] >= STEP_S * 0.9
