"""PNG plots of one or more runs' metrics (matplotlib; imported only by `rft metrics plot`).

Each figure overlays every run given, one colour per run:

- `reward.png`: mean rollout reward per explorer step (solid) and mean reward of each trained
  batch (dashed), against step and against wall time;
- `eval_accuracy.png`: held-out accuracy (greedy, mean over the eval tasksets; dotted lines per
  taskset when there are several), against explorer step and wall time;
- `staleness.png`: how many versions behind the trained experiences were (mean, with the
  min-max band), per trainer step;
- `rollout_throughput.png`: generated tokens per second of rollout, per explorer step;
- `trainer_step_time.png`: seconds per optimizer step (solid) and seconds waiting for a full
  batch (dashed), per trainer step.

Wall time is minutes since the run's first metric, and every value is drawn in time order; against
step, values several processes sent for one step (explorers sharing a group) are averaged. A
figure whose metrics no run has is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display needed

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.ticker import MaxNLocator, PercentFormatter  # noqa: E402

from rft.consumers.metrics.series import MetricSeries, Point  # noqa: E402

_COLOURS = [plt.get_cmap("tab10")(i) for i in range(10)]


@dataclass(frozen=True)
class Line:
    component: str
    name: str
    label: str  # what the line is; the run name is added when several runs are drawn
    style: str = "-"


def _xy(run: MetricSeries, line: Line, wall: bool) -> tuple[list[float], list[float]]:
    """Against wall time every value in time order; against step one value per step, the mean
    of those several processes (explorers sharing a group) sent for it."""
    points = run.points(line.component, line.name)
    if wall:
        points = sorted(points, key=lambda p: p.timestamp_ms)
        return [run.minutes(p) for p in points], [p.value for p in points]
    by_step: dict[int, list[float]] = {}
    for p in points:
        by_step.setdefault(p.step, []).append(p.value)
    steps = sorted(by_step)
    return [float(s) for s in steps], [sum(by_step[s]) / len(by_step[s]) for s in steps]


def _style(ax: Axes, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)


def _label(run: MetricSeries, line: Line, runs: Sequence[MetricSeries], lines: int) -> str:
    if len(runs) == 1:
        return line.label
    return run.run if lines == 1 else f"{run.run}: {line.label}"


def _draw(
    ax: Axes,
    runs: Sequence[MetricSeries],
    lines: Sequence[Line],
    wall: bool,
    markers: bool,
) -> bool:
    drawn = False
    for i, run in enumerate(runs):
        for line in lines:
            xs, ys = _xy(run, line, wall)
            if not xs:
                continue
            ax.plot(
                xs,
                ys,
                line.style,
                color=_COLOURS[i % len(_COLOURS)],
                marker="o" if markers else None,
                markersize=4,
                linewidth=1.6,
                label=_label(run, line, runs, len(lines)),
            )
            drawn = True
    return drawn


@dataclass(frozen=True)
class Figure:
    """One PNG: its lines against step, and also against wall time when `wall`."""

    filename: str
    title: str
    ylabel: str
    xlabel: str
    lines: Callable[[Sequence[MetricSeries]], list[Line]]
    wall: bool = False
    markers: bool = False
    percent: bool = False
    band: tuple[Line, Line] | None = None  # min and max drawn as a shaded band
    integer_y: bool = False
    from_zero: bool = False  # quantities that cannot go below 0 start their axis there


def _eval_lines(runs: Sequence[MetricSeries]) -> list[Line]:
    lines = [Line("explorer", "eval_accuracy", "mean over eval tasksets")]
    per_taskset = sorted(
        {
            n
            for r in runs
            for n in r.names("explorer")
            if n.startswith("eval/") and n.endswith("/accuracy")
        }
    )
    if len(per_taskset) > 1:
        lines += [Line("explorer", n, n.split("/")[1], ":") for n in per_taskset]
    return lines


FIGURES: tuple[Figure, ...] = (
    Figure(
        "reward.png",
        "Reward",
        "mean reward",
        "explorer / trainer step",
        lambda runs: [
            Line("explorer", "reward_mean", "rollouts (explorer step)"),
            Line("trainer", "reward_mean", "trained batch (trainer step)", "--"),
        ],
        wall=True,
    ),
    Figure(
        "eval_accuracy.png",
        "Held-out accuracy (greedy)",
        "accuracy",
        "explorer step",
        _eval_lines,
        wall=True,
        markers=True,
        percent=True,
    ),
    Figure(
        "staleness.png",
        "Staleness of trained experiences (min-max band)",
        "versions behind the trainer",
        "trainer step",
        lambda runs: [Line("trainer", "staleness_mean", "mean")],
        band=(Line("trainer", "staleness_min", "min"), Line("trainer", "staleness_max", "max")),
        integer_y=True,
        from_zero=True,
    ),
    Figure(
        "rollout_throughput.png",
        "Rollout throughput",
        "generated tokens / s",
        "explorer step",
        lambda runs: [Line("explorer", "rollout_tokens_per_s", "tokens/s")],
        from_zero=True,
    ),
    Figure(
        "trainer_step_time.png",
        "Trainer step time",
        "seconds",
        "trainer step",
        lambda runs: [
            Line("trainer", "step_time_s", "optimizer step"),
            Line("trainer", "wait_time_s", "waiting for a full batch", "--"),
        ],
        from_zero=True,
    ),
)


def _band(ax: Axes, runs: Sequence[MetricSeries], band: tuple[Line, Line]) -> None:
    for i, run in enumerate(runs):
        low: list[Point] = run.points(band[0].component, band[0].name)
        high: list[Point] = run.points(band[1].component, band[1].name)
        if low and len(low) == len(high):
            ax.fill_between(
                [float(p.step) for p in low],
                [p.value for p in low],
                [p.value for p in high],
                color=_COLOURS[i % len(_COLOURS)],
                alpha=0.15,
                linewidth=0,
            )


def write_plots(runs: Sequence[MetricSeries], out_dir: Path) -> tuple[list[Path], list[str]]:
    """Write every figure some run has data for; return the files written and the figures
    skipped for lack of data."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    skipped: list[str] = []
    # one run is named in the title; several are named in the legend
    suffix = f" — {runs[0].run}" if len(runs) == 1 else ""
    for fig_spec in FIGURES:
        lines = fig_spec.lines(runs)
        panels = 2 if fig_spec.wall else 1
        fig, axes = plt.subplots(
            1, panels, figsize=(6.2 * panels if panels > 1 else 8.0, 4.2), squeeze=False
        )
        drawn = False
        for col, wall in enumerate([False, True][:panels]):
            ax = axes[0][col]
            drawn |= _draw(ax, runs, lines, wall, fig_spec.markers)
            if fig_spec.band is not None:
                _band(ax, runs, fig_spec.band)
            xlabel = "wall time (minutes since the run's first metric)" if wall else fig_spec.xlabel
            subtitle = ("against wall time" if wall else "against step") if panels > 1 else ""
            _style(ax, subtitle, xlabel, fig_spec.ylabel)
            if not wall:
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if fig_spec.integer_y:
                ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            if fig_spec.from_zero:
                ax.set_ylim(bottom=0)
            if fig_spec.percent:
                ax.yaxis.set_major_formatter(PercentFormatter(1.0))
                ax.set_ylim(-0.02, 1.02)
        if not drawn:
            plt.close(fig)
            skipped.append(fig_spec.filename)
            continue
        handles, labels = axes[0][0].get_legend_handles_labels()
        if len(labels) > 1:
            axes[0][0].legend(fontsize=8, frameon=False)
        fig.suptitle(f"{fig_spec.title}{suffix}", fontsize=12)
        fig.tight_layout()
        path = out_dir / fig_spec.filename
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written, skipped
