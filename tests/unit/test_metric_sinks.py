"""Metric sinks: what Metric events become in each sink, read back with each format's own reader;
and the load-time checks of `monitor.monitor_type` / `monitor.monitor_args`."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from rft.catalog import load_config
from rft.consumers.metrics.sinks import (
    METRIC_SINKS,
    MetricFanout,
    SinkConfigError,
    SinkContext,
    check_sinks,
    format_metric,
    sink_settings,
)
from rft.errors import ConfigError, MetricSinkError
from rft.events.models import Metric
from tests.unit.config_samples import MINIMAL

METRICS = [
    Metric(
        "explorer", "p.n", 1, {"reward_mean": 0.25, "accuracy": 0.5}, timestamp=1_700_000_000_000
    ),
    Metric("trainer", "p.n", 1, {"loss": 0.125, "grad_norm": 2.0}, timestamp=1_700_000_001_500),
    Metric(
        "explorer", "p.n", 2, {"reward_mean": 0.75, "accuracy": 1.0}, timestamp=1_700_000_003_250
    ),
]


@pytest.fixture
def context(tmp_path: Path) -> SinkContext:
    return SinkContext(tmp_path / "job" / "monitor", "p", "n")


def write_all(sink, metrics=METRICS) -> None:
    for m in metrics:
        sink.write(m)
    sink.close()


def test_console_sink_prints_one_line_per_metric_known_keys_first(context) -> None:
    out = io.StringIO()
    write_all(METRIC_SINKS.get("console")(context, out))
    lines = out.getvalue().splitlines()
    assert len(lines) == len(METRICS)
    assert lines[0].index("reward_mean=0.25") < lines[0].index("accuracy=0.5")
    assert lines[1] == format_metric(METRICS[1])
    assert format_metric(METRICS[1]).startswith("[ trainer step    1] loss=0.125")


def test_jsonl_sink_writes_one_row_per_metric_at_the_default_path(context) -> None:
    sink = METRIC_SINKS.get("jsonl")(context)
    sink.write(METRICS[0])
    path = context.monitor_dir / "metrics.jsonl"
    assert path.read_text() == ""  # nothing is claimed durable before flush
    sink.flush()
    assert len(path.read_text().splitlines()) == 1
    write_all(sink, METRICS[1:])
    back = [json.loads(line) for line in path.read_text().splitlines()]
    assert back == [
        {
            "component": m.component,
            "run": m.run,
            "step": m.step,
            "timestamp": m.timestamp,
            "values": m.values,
            "tags": m.tags,
        }
        for m in METRICS
    ]


def test_two_jsonl_sinks_appending_to_one_file_keep_every_line_whole(context) -> None:
    explorer, trainer = (METRIC_SINKS.get("jsonl")(context) for _ in range(2))
    for i in range(200):
        explorer.write(Metric("explorer", "p.n", i, {"x": float(i)}, timestamp=1))
        trainer.write(Metric("trainer", "p.n", i, {"y": float(i)}, timestamp=1))
        if i % 7 == 0:
            explorer.flush()
            trainer.flush()
    explorer.close()
    trainer.close()
    rows = [json.loads(line) for line in (context.monitor_dir / "metrics.jsonl").open()]
    for component in ("explorer", "trainer"):
        assert [r["step"] for r in rows if r["component"] == component] == list(range(200))


def test_sql_sink_stores_one_row_per_value(context) -> None:
    write_all(METRIC_SINKS.get("sql")(context))
    engine = sa.create_engine(f"sqlite:///{context.monitor_dir / 'metrics.db'}")
    table = sa.Table("rft_metrics", sa.MetaData(), autoload_with=engine)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                table.c.component,
                table.c.run,
                table.c.step,
                table.c.name,
                table.c.value,
                table.c.timestamp,
            )
        ).all()
    engine.dispose()
    assert sorted(tuple(r) for r in rows) == sorted(
        (m.component, m.run, m.step, k, v, m.timestamp)
        for m in METRICS
        for k, v in m.values.items()
    )


def test_sql_sink_takes_any_url(tmp_path, context) -> None:
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    write_all(METRIC_SINKS.get("sql")(context, url=url), METRICS[:1])
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        count = conn.execute(sa.text("select count(*) from rft_metrics")).scalar_one()
    engine.dispose()
    assert count == len(METRICS[0].values)
    assert not (context.monitor_dir / "metrics.db").exists()


def test_tensorboard_sink_scalars_read_back_with_tensorboards_reader(context) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    write_all(METRIC_SINKS.get("tensorboard")(context))
    log_dir = context.monitor_dir / "tensorboard"
    assert sorted(p.name for p in log_dir.iterdir()) == ["explorer", "trainer"]
    for component in ("explorer", "trainer"):
        acc = EventAccumulator(str(log_dir / component))
        acc.Reload()
        expected: dict[str, list[tuple[float, int, float]]] = {}
        for m in METRICS:
            if m.component == component:
                for k, v in m.values.items():
                    expected.setdefault(f"{component}/{k}", []).append(
                        (m.timestamp / 1000, m.step, float(np.float32(v)))  # simple_value is f32
                    )
        assert sorted(acc.Tags()["scalars"]) == sorted(expected)
        for tag, points in expected.items():
            assert [(e.wall_time, e.step, e.value) for e in acc.Scalars(tag)] == points


def test_wandb_sink_writes_an_offline_run(context) -> None:
    pytest.importorskip("wandb")
    write_all(METRIC_SINKS.get("wandb")(context))
    (run,) = (context.monitor_dir / "wandb").glob("offline-run-*/run-*.wandb")
    # wandb (0.31) ships no reader for its run log; its protobuf records keep key strings as is
    log = run.read_bytes()
    for m in METRICS:
        assert f"{m.component}/step".encode() in log
        for k in m.values:
            assert f"{m.component}/{k}".encode() in log


def test_mlflow_sink_logs_to_a_local_store(context) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    write_all(METRIC_SINKS.get("mlflow")(context))
    client = MlflowClient(tracking_uri=f"sqlite:///{context.monitor_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("p")
    (run,) = client.search_runs([experiment.experiment_id])
    history = client.get_metric_history(run.info.run_id, "explorer/reward_mean")
    assert [(h.step, h.value, h.timestamp) for h in history] == [
        (m.step, m.values["reward_mean"], m.timestamp) for m in METRICS if m.component == "explorer"
    ]


# --- the load-time checks ---------------------------------------------------------------------


def test_unknown_sink_name_is_refused_with_a_close_match() -> None:
    with pytest.raises(
        ConfigError, match=r"monitor\.monitor_type 'tensorbord'; did you mean 'tensorboard'"
    ):
        check_sinks(["console", "tensorbord"], {})
    with pytest.raises(SinkConfigError) as caught:
        check_sinks(["grafana"], {})
    assert caught.value.key == "monitor.monitor_type"


def test_a_sink_listed_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="monitor.monitor_type: 'jsonl' is listed twice"):
        check_sinks(["jsonl", "console", "jsonl"], {})


@pytest.mark.parametrize("name", ["wandb", "mlflow"])
def test_a_sink_whose_package_is_missing_names_the_install_command(name: str) -> None:
    if importlib.util.find_spec(name) is not None:
        pytest.skip(f"{name} is installed here")
    with pytest.raises(ConfigError, match=f"monitor.monitor_type: .*pip install {name}$"):
        check_sinks(["console", name], {})


def test_installed_optional_package_passes() -> None:
    check_sinks(["tensorboard", "sql", "jsonl", "console"], {})


@pytest.mark.parametrize(
    ("names", "args", "expected"),
    [
        (["jsonl"], {}, {"jsonl": {}}),
        (["jsonl"], {"path": "m.jsonl"}, {"jsonl": {"path": "m.jsonl"}}),  # flat, one sink
        (
            ["jsonl", "tensorboard", "console"],
            {"jsonl": {"path": "m.jsonl"}, "tensorboard": {"log_dir": "tb"}},
            {"jsonl": {"path": "m.jsonl"}, "tensorboard": {"log_dir": "tb"}, "console": {}},
        ),
        (["sql"], {"sql": None}, {"sql": {}}),
    ],
)
def test_monitor_args_shapes(names, args, expected) -> None:
    assert sink_settings(names, args) == expected


@pytest.mark.parametrize(
    ("names", "args", "message"),
    [
        (["jsonl", "console"], {"path": "m"}, "monitor.monitor_args: with 2 sinks"),
        (["jsonl"], {"jsonl": {"path": "m"}, "url": "x"}, "mixes per-sink sections"),
        (["jsonl"], {"sql": {"url": "x"}}, "monitor.monitor_args.sql: .*does not select"),
        (
            ["tensorboard"],
            {"tensorboard": {"log_dri": "x"}},
            "monitor.monitor_args.tensorboard.log_dri: .*did you mean 'log_dir'",
        ),
        (["jsonl"], {"paht": "x"}, r"monitor.monitor_args.paht: .*did you mean 'path'"),
        (["console"], {"console": {"stream": "x"}}, "sink 'console' has no setting 'stream'"),
        (
            ["jsonl"],
            {"jsonl": {"path": [1, 2]}},
            "monitor.monitor_args.jsonl.path: expected a string",
        ),
        (["jsonl"], {"jsonl": "m.jsonl"}, "monitor.monitor_args.jsonl: expected a mapping"),
    ],
)
def test_bad_monitor_args_are_refused_naming_the_key(names, args, message) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        check_sinks(names, args)
    assert isinstance(caught.value, SinkConfigError)
    assert str(caught.value).startswith(caught.value.key)  # the loader places it by this key


def test_config_monitor_type_takes_a_name_or_a_list(tmp_path: Path) -> None:
    def load(monitor: str):
        path = tmp_path / "run.yaml"
        path.write_text(MINIMAL + f"checkpoint_root_dir: {tmp_path}/ck\nmonitor:\n{monitor}")
        return load_config(path)

    assert load_config_default(tmp_path).monitor.monitor_type == ["console"]
    assert load("  monitor_type: jsonl\n").monitor.monitor_type == ["jsonl"]
    cfg = load("  monitor_type: [jsonl, sql]\n  monitor_args: {sql: {url: 'sqlite://'}}\n")
    assert cfg.monitor.monitor_type == ["jsonl", "sql"]
    with MetricFanout.for_config(cfg) as sinks:
        assert sinks.names == ["jsonl", "sql"]
        sinks.write(METRICS[0])
        sinks.flush()
    row = json.loads((cfg.job_dir / "monitor" / "metrics.jsonl").read_text())
    assert row["values"] == METRICS[0].values


def load_config_default(tmp_path: Path):
    path = tmp_path / "default.yaml"
    path.write_text(MINIMAL)
    return load_config(path)


# --- the fanout ------------------------------------------------------------------------------


class BrokenSink:
    """A sink whose storage has gone away: every call fails."""

    def __init__(self) -> None:
        self.closed = False

    def write(self, metric: Metric) -> None:
        raise OSError("disk full")

    def flush(self) -> None:
        raise OSError("disk full")

    def close(self) -> None:
        self.closed = True
        raise OSError("disk full")


def test_fanout_writes_every_sink_and_closes_all_even_when_one_fails(context) -> None:
    out = io.StringIO()
    console = METRIC_SINKS.get("console")(context, out)
    jsonl = METRIC_SINKS.get("jsonl")(context)
    fanout = MetricFanout({"console": console, "jsonl": jsonl})
    for m in METRICS:
        fanout.write(m)
    fanout.flush()
    broken = BrokenSink()
    fanout.sinks["broken"] = broken
    with pytest.raises(MetricSinkError, match="sink 'broken' cannot write: disk full"):
        fanout.write(METRICS[0])
    with pytest.raises(MetricSinkError, match="sink 'broken' cannot close"):
        fanout.close()
    assert broken.closed and jsonl._fh.closed
    # the sinks before the broken one got the failed write too, and close flushed it
    assert len(out.getvalue().splitlines()) == len(METRICS) + 1
    assert len((context.monitor_dir / "metrics.jsonl").read_text().splitlines()) == len(METRICS) + 1


def test_fanout_open_closes_what_it_opened_when_a_later_sink_fails(context, tmp_path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(MetricSinkError, match="sink 'sql' cannot open"):
        MetricFanout.open(["jsonl", "sql"], {"sql": {"url": f"sqlite:///{blocker}/x.db"}}, context)
