"""Metric series and the PNGs drawn from them (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rft.consumers.metrics.series import MetricSeries
from rft.events.models import Metric

pytest.importorskip("matplotlib")

from rft.consumers.metrics.plots import FIGURES, write_plots  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"
T0 = 1_767_225_600_000


def run(name: str, steps: int, with_eval: bool = True) -> MetricSeries:
    series = MetricSeries(name)
    for s in range(1, steps + 1):
        at = T0 + s * 30_000
        series.add(
            Metric(
                "explorer",
                name,
                s,
                {"tasks": 4.0, "reward_mean": s / steps, "rollout_tokens_per_s": 90.0 + s},
                timestamp=at,
            )
        )
        series.add(
            Metric(
                "trainer",
                name,
                s,
                {
                    "reward_mean": s / steps,
                    "step_time_s": 20.0,
                    "wait_time_s": 3.0,
                    "staleness_mean": 0.5,
                    "staleness_min": 0.0,
                    "staleness_max": 1.0,
                },
                timestamp=at + 5_000,
            )
        )
    if with_eval:
        for s in (0, steps):
            series.add(
                Metric(
                    "explorer",
                    name,
                    s,
                    {"eval_accuracy": 0.1 + s / 20, "eval/a/accuracy": 0.1, "eval/b/accuracy": 0.2},
                    timestamp=T0 + s * 30_000 + 1,
                )
            )
    return series


def test_series_are_in_step_order_with_wall_time_from_the_first_metric() -> None:
    series = MetricSeries("r")
    series.add(Metric("trainer", "r", 2, {"x": 2.0}, timestamp=T0 + 120_000))
    series.add(Metric("trainer", "r", 1, {"x": 1.0}, timestamp=T0 + 60_000))
    series.add(Metric("explorer", "r", 0, {"y": 0.5}, timestamp=T0))
    points = series.points("trainer", "x")
    assert [p.step for p in points] == [1, 2] and [p.value for p in points] == [1.0, 2.0]
    assert [series.minutes(p) for p in points] == [1.0, 2.0]
    assert series.names("explorer") == ["y"] and series.points("trainer", "nope") == []


def test_every_figure_is_written_for_overlaid_runs(tmp_path: Path) -> None:
    written, skipped = write_plots([run("p.a", 6), run("p.b", 4)], tmp_path)
    assert skipped == []
    assert sorted(p.name for p in written) == sorted(f.filename for f in FIGURES)
    for path in written:
        assert path.read_bytes()[:8] == PNG and path.stat().st_size > 10_000


def test_a_figure_without_data_is_skipped(tmp_path: Path) -> None:
    written, skipped = write_plots([run("p.a", 3, with_eval=False)], tmp_path)
    assert skipped == ["eval_accuracy.png"]
    assert not (tmp_path / "eval_accuracy.png").exists() and len(written) == len(FIGURES) - 1


def test_against_step_values_of_one_step_are_averaged_and_against_time_kept_in_order() -> None:
    from rft.consumers.metrics.plots import Line, _xy

    series = MetricSeries("r")
    line = Line("explorer", "reward_mean", "rollouts")
    # two explorers of one group report step 3; the second one's step 2 comes after both
    for step, value, at in ((3, 0.2, 60_000), (3, 0.4, 90_000), (2, 0.1, 120_000)):
        series.add(Metric("explorer", "r", step, {"reward_mean": value}, timestamp=T0 + at))
    assert _xy(series, line, wall=False) == ([2.0, 3.0], [0.1, pytest.approx(0.3)])
    assert _xy(series, line, wall=True) == ([0.0, 0.5, 1.0], [0.2, 0.4, 0.1])
