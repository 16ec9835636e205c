"""Metric sinks: where Metric events from the `metrics` topic end up (console, SQL, JSONL).

Every component emits Metric events; a sink only reads them, so sinks can be attached, swapped or
replayed after the fact. Sinks are registered by name (`monitor.monitor_type`); a user adds one with
one class and one decorator.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Protocol, TextIO

from rft.events.models import Metric
from rft.registry import Registry


class MetricSink(Protocol):
    def write(self, metric: Metric) -> None: ...

    def close(self) -> None: ...


METRIC_SINKS: Registry[type[Any]] = Registry("monitor.monitor_type")

# keys shown first on a console line, in this order, when present
_CONSOLE_KEYS = (
    "reward_mean",
    "accuracy",
    "eval_accuracy",
    "loss",
    "pg_clipfrac",
    "kl",
    "entropy",
    "grad_norm",
    "staleness_mean",
    "response_length_mean",
    "rollout_tokens_per_s",
    "step_time_s",
)


def format_metric(metric: Metric, max_keys: int = 8) -> str:
    keys = [k for k in _CONSOLE_KEYS if k in metric.values]
    keys += sorted(k for k in metric.values if k not in keys)
    shown = " ".join(f"{k}={metric.values[k]:.4g}" for k in keys[:max_keys])
    return f"[{metric.component:>8} step {metric.step:>4}] {shown}"


@METRIC_SINKS.register("console")
class ConsoleSink:
    def __init__(self, stream: TextIO | None = None, **_: Any) -> None:
        self.stream = stream or sys.stdout

    def write(self, metric: Metric) -> None:
        print(format_metric(metric), file=self.stream, flush=True)

    def close(self) -> None:
        self.stream.flush()


@METRIC_SINKS.register("jsonl")
class JsonlSink:
    def __init__(self, path: str | Path = "metrics.jsonl", **_: Any) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")

    def write(self, metric: Metric) -> None:
        row = {
            "component": metric.component,
            "run": metric.run,
            "step": metric.step,
            "timestamp": metric.timestamp,
            **metric.values,
        }
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


@METRIC_SINKS.register("sql")
class SqlSink:
    """One row per (component, run, step, name): query it with any SQL tool."""

    def __init__(self, url: str = "sqlite:///metrics.db", **_: Any) -> None:
        import sqlalchemy as sa

        self._sa = sa
        self.engine = sa.create_engine(url)
        meta = sa.MetaData()
        self.table = sa.Table(
            "rft_metrics",
            meta,
            sa.Column("component", sa.String(64), nullable=False),
            sa.Column("run", sa.String(128), nullable=False),
            sa.Column("step", sa.Integer, nullable=False),
            sa.Column("name", sa.String(128), nullable=False),
            sa.Column("value", sa.Float, nullable=False),
            sa.Column("timestamp", sa.BigInteger, nullable=False),
        )
        meta.create_all(self.engine)

    def write(self, metric: Metric) -> None:
        rows = [
            {
                "component": metric.component,
                "run": metric.run,
                "step": metric.step,
                "name": k,
                "value": float(v),
                "timestamp": metric.timestamp,
            }
            for k, v in metric.values.items()
        ]
        if rows:
            with self.engine.begin() as conn:
                conn.execute(self.table.insert(), rows)

    def close(self) -> None:
        self.engine.dispose()
