"""`rft run`'s live progress line: what it says, and where it goes on a terminal and off one."""

from __future__ import annotations

import io
from pathlib import Path

from rft.consumers.metrics.sinks import ConsoleSink, MetricFanout, SinkContext
from rft.events.models import Metric
from rft.events.reader import Envelope
from rft.supervisor.progress_line import ProgressLine, RunProgress
from rft.supervisor.run_supervisor import RunSummary, RunSummaryTracker, RunSupervisor


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def explorer(step: int, reward: float) -> Metric:
    return Metric(
        "explorer", "r", step, {"tasks": 4.0, "reward_mean": reward, "model_version": 0.0}
    )


def trainer(step: int) -> Metric:
    return Metric("trainer", "r", step, {"step_time_s": 2.0, "reward_mean": 9.0})


def test_progress_counts_the_step_both_sides_reached_and_extrapolates_the_eta() -> None:
    clock = Clock()
    progress = RunProgress(10, clock=clock)
    assert progress.text() == (
        "step 0/10 (explorer 0, trainer 0) | ETA ? | reward - | eval accuracy -"
    )
    progress.write(Metric("explorer", "r", 0, {"eval_accuracy": 0.25, "model_version": 0.0}))
    progress.write(explorer(1, 0.5))
    progress.write(trainer(1))  # the first step metrics: the ETA counts from here
    clock.now += 30
    progress.write(explorer(2, 0.75))
    progress.write(explorer(3, 0.8))
    progress.write(trainer(2))
    # both sides are at step 2 at least: one step in 30s, 8 to go
    assert progress.step == 2
    assert progress.text() == (
        "step 2/10 (explorer 3, trainer 2) | ETA 0:04:00 | reward 0.800 | eval accuracy 0.250"
    )
    clock.now += 10  # the ETA counts down while a step runs
    assert progress.eta_s() == 230.0
    clock.now += 1000
    assert progress.eta_s() == 0.0


def test_on_a_terminal_the_line_is_cleared_before_metric_lines_and_redrawn_after() -> None:
    tty = Terminal()
    line = ProgressLine(RunProgress(4), stream=tty)
    sinks = MetricFanout({"console": ConsoleSink(SinkContext(Path("."), "p", "n"), stream=tty)})
    tracker = RunSummaryTracker(RunSummary())
    for step in (1, 2):
        batch = [
            Envelope(m, "t", 0, step, None, [], 0) for m in (explorer(step, 0.5), trainer(step))
        ]
        RunSupervisor._feed(batch, sinks, tracker, line)
    out = tty.getvalue()
    # metric lines go above the live line: it is cleared before them and drawn again after
    chunks = out.split("\r\x1b[K")
    assert chunks[0].startswith("[explorer step    1]") and chunks[0].count("\n") == 2
    assert chunks[1].startswith("step 1/4") and "\n" not in chunks[1]
    assert chunks[2].startswith("[explorer step    2]") and chunks[2].count("\n") == 2
    assert len(chunks) == 4
    assert chunks[3].startswith("step 2/4 (explorer 2, trainer 2)")
    assert not out.endswith("\n")
    line.clear()
    assert tty.getvalue().endswith("\r\x1b[K")
    assert tracker.summary.trainer_steps == 2


def test_off_a_terminal_a_plain_line_is_printed_once_per_step() -> None:
    log = io.StringIO()
    line = ProgressLine(RunProgress(4), stream=log)
    for m in (
        explorer(1, 0.5),
        trainer(1),
        Metric("trainer", "r", 1, {"x": 1.0}),
        explorer(2, 0.6),
    ):
        line.progress.write(m)
        line.show()
    line.clear()
    assert log.getvalue().splitlines() == [
        "rft run: step 1/4 (explorer 1, trainer 1) | ETA ? | reward 0.500 | eval accuracy -"
    ]


def test_the_summary_gives_the_trainers_largest_gpu_peak_only_when_it_reported_one() -> None:
    on_cpu = RunSummaryTracker(RunSummary())
    on_cpu.write(trainer(1))
    assert not any("GPU" in line for line in on_cpu.summary.lines())
    on_gpu = RunSummaryTracker(RunSummary())
    for step, peak in ((1, 31.5), (2, 40.25), (3, 38.0)):
        on_gpu.write(Metric("trainer", "r", step, {"step_time_s": 4.0, "gpu_peak_gib": peak}))
    lines = on_gpu.summary.lines()
    assert "trainer GPU memory: peak 40.25 GiB allocated by torch (its largest step)" in lines
