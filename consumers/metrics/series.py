"""MetricSeries: a run's metrics topic as time series, one per (component, metric name).

`read_metric_series` reads the metrics topic from its start to what is committed now (a bounded
read: it ends, and commits nothing) and folds each Metric event into points of
(step, timestamp ms, value). What the plots draw comes from here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from rft.config.connections import KafkaSettings
from rft.consumers.replay.topic_range import RangeReader
from rft.events.models import Metric


@dataclass(frozen=True)
class Point:
    step: int
    timestamp_ms: int
    value: float


@dataclass
class MetricSeries:
    """Every value of one run's metrics, by component and name, in step order."""

    run: str
    series: dict[tuple[str, str], list[Point]] = field(default_factory=lambda: defaultdict(list))
    first_ms: int | None = None  # the run's first metric: wall time counts from here

    def add(self, metric: Metric) -> None:
        for name, value in metric.values.items():
            self.series[(metric.component, name)].append(
                Point(metric.step, metric.timestamp, value)
            )
        if self.first_ms is None or metric.timestamp < self.first_ms:
            self.first_ms = metric.timestamp

    def points(self, component: str, name: str) -> list[Point]:
        """The values of `component`'s `name`, by step then time."""
        return sorted(
            self.series.get((component, name), []), key=lambda p: (p.step, p.timestamp_ms)
        )

    def names(self, component: str) -> list[str]:
        return sorted(n for c, n in self.series if c == component)

    def minutes(self, point: Point) -> float:
        """Wall time of `point` in minutes since the run's first metric."""
        return (point.timestamp_ms - (self.first_ms or point.timestamp_ms)) / 60_000


def read_metric_series(kafka: KafkaSettings, topic: str, run: str) -> MetricSeries:
    """Every Metric event of `topic` (a run's metrics topic), labelled `run`."""
    out = MetricSeries(run)
    with RangeReader.open(kafka, [topic]) as reader:
        for batch in reader.batches():
            for env in batch:
                if isinstance(env.event, Metric):
                    out.add(env.event)
    return out
