"""Metric sinks: what the metrics topic's events become in each sink, read back independently."""

from __future__ import annotations

import io
import json
import sqlite3

from consumers.metric_sinks import METRIC_SINKS, format_metric
from rft.events.models import Metric

METRICS = [
    Metric("explorer", "p.n", 1, {"reward_mean": 0.25, "accuracy": 0.5}, timestamp=1000),
    Metric("trainer", "p.n", 1, {"loss": 0.125, "grad_norm": 2.0}, timestamp=2000),
]


def test_sql_sink_stores_one_row_per_value(tmp_path) -> None:
    db = tmp_path / "m.db"
    sink = METRIC_SINKS.get("sql")(url=f"sqlite:///{db}")
    for m in METRICS:
        sink.write(m)
    sink.close()
    rows = sqlite3.connect(db).execute(
        "select component, step, name, value, timestamp from rft_metrics order by name"
    )
    assert sorted(rows) == sorted(
        (m.component, m.step, k, v, m.timestamp) for m in METRICS for k, v in m.values.items()
    )


def test_jsonl_sink_round_trips(tmp_path) -> None:
    path = tmp_path / "m.jsonl"
    sink = METRIC_SINKS.get("jsonl")(path=path)
    for m in METRICS:
        sink.write(m)
    sink.close()
    back = [json.loads(line) for line in path.read_text().splitlines()]
    assert [
        (b["component"], b["step"], b["loss"] if "loss" in b else b["accuracy"]) for b in back
    ] == [
        ("explorer", 1, 0.5),
        ("trainer", 1, 0.125),
    ]


def test_console_sink_shows_known_keys_first() -> None:
    out = io.StringIO()
    sink = METRIC_SINKS.get("console")(stream=out)
    sink.write(METRICS[0])
    line = out.getvalue()
    assert line.index("reward_mean=0.25") < line.index("accuracy=0.5")
    assert format_metric(METRICS[1]).startswith("[ trainer step    1] loss=0.125")
