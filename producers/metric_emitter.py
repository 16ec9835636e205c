"""MetricEmitter: writes Metric events for one component of one run to the `metrics` topic.

Metrics ride the event log like everything else, so sinks (console, SQL, files) attach to the
topic, and a finished run's metrics can be replayed into a new sink.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from rft.events.models import Metric
from rft.events.writer import EventWriter


class MetricEmitter:
    def __init__(
        self,
        writer: EventWriter,
        topic: str,
        component: str,
        run: str,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        self.writer = writer
        self.topic = topic
        self.component = component
        self.run = run
        # labels every metric of this emitter carries, e.g. the explorer id and group that sent it
        self.tags = dict(tags or {})

    def emit(self, step: int, values: Mapping[str, float], flush: bool = True) -> Metric:
        clean = {k: float(v) for k, v in values.items() if math.isfinite(float(v))}
        metric = Metric(
            component=self.component, run=self.run, step=step, values=clean, tags=self.tags
        )
        self.writer.send(self.topic, metric, key=self.component)
        if flush:
            self.writer.flush()
        return metric
