"""Metric sinks: where Metric events from the `metrics` topic end up, and how the config picks them.

Every component emits Metric events; a sink only reads them, so sinks can be attached, swapped or
replayed after the fact. Sinks are registered by name in `METRIC_SINKS`; a user adds one with one
class and one decorator.

Configuration (the `monitor` section):

    monitor:
      monitor_type: [console, jsonl, tensorboard]   # one name, or a list
      monitor_args:                                  # each sink's settings under its name
        jsonl: {path: /data/run7/metrics.jsonl}
        tensorboard: {log_dir: /data/run7/tb}

With a single sink its settings may also be given flat (`monitor_type: sql` with
`monitor_args: {url: "postgresql://..."}`). A sink's settings are the keyword-only parameters of its
class's constructor; `check_sinks` refuses unknown names and settings before any sink opens, and
names the `pip install` a sink's missing optional package needs. Defaults live in the run's monitor directory
`<job_dir>/monitor` (job_dir = `<checkpoint_root_dir>/<project>/<name>`):

| sink        | settings (default)                                 | optional package |
|-------------|----------------------------------------------------|------------------|
| console     | none                                               |                  |
| jsonl       | path (`metrics.jsonl`)                             |                  |
| sql         | url, any SQLAlchemy URL (`sqlite:///…/metrics.db`) |                  |
| tensorboard | log_dir (`tensorboard/`, a run dir per component)  | tensorboard      |
| wandb       | dir (the monitor directory); offline mode only     | wandb            |
| mlflow      | tracking_uri (`sqlite:///…/mlflow.db`)             | mlflow           |

TensorBoard, W&B and MLflow are imported only when selected. A sink is written to with `write`,
made durable with `flush` (the follower commits topic offsets only after it), and `close`d once.
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import json
import os
import re
import sys
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, TextIO

from rft.config.binding import MISSING_VALUE, ConfigBinder
from rft.errors import ConfigError, MetricSinkError, RftError, StorageError
from rft.events.models import Metric
from rft.registry import Registry

if TYPE_CHECKING:
    from rft.config import RftConfig

TYPE_KEY = "monitor.monitor_type"
ARGS_KEY = "monitor.monitor_args"


class MetricSink(Protocol):
    def write(self, metric: Metric) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class OptionalPackage(NamedTuple):
    """A package a sink imports only when selected: its import name and what pip installs."""

    module: str
    pip: str


@dataclass(frozen=True)
class SinkContext:
    """What every sink may need from the run: where its files go by default and the run's names."""

    monitor_dir: Path
    project: str
    name: str

    @classmethod
    def for_config(cls, cfg: RftConfig) -> SinkContext:
        return cls(cfg.job_dir / "monitor", cfg.project, cfg.name)


METRIC_SINKS: Registry[type[Any]] = Registry(TYPE_KEY)

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
    "critic/vf_loss",  # PPO's critic
    "critic/explained_variance",
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
    """One line per metric on stdout (or `stream`), the best-known keys first."""

    requires: ClassVar[OptionalPackage | None] = None

    def __init__(self, context: SinkContext, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout

    def write(self, metric: Metric) -> None:
        print(format_metric(metric), file=self.stream)

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        self.stream.flush()


@METRIC_SINKS.register("jsonl")
class JsonlSink:
    """One JSON object per metric: component, run, step, timestamp (ms), values, tags."""

    requires: ClassVar[OptionalPackage | None] = None

    def __init__(self, context: SinkContext, *, path: str | None = None) -> None:
        self.path = Path(path) if path else context.monitor_dir / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # unbuffered append: each flush is one write, so an explorer and a trainer appending to
        # the same file never interleave inside a line
        self._fh = self.path.open("ab", buffering=0)
        self._pending: list[bytes] = []

    def write(self, metric: Metric) -> None:
        row = {
            "component": metric.component,
            "run": metric.run,
            "step": metric.step,
            "timestamp": metric.timestamp,
            "values": metric.values,
            "tags": metric.tags,
        }
        self._pending.append(json.dumps(row).encode("utf-8") + b"\n")

    def flush(self) -> None:
        if self._pending:
            self._fh.write(b"".join(self._pending))
            self._pending.clear()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._fh.close()


@METRIC_SINKS.register("sql")
class SqlSink:
    """One row per (component, run, step, name) in table `rft_metrics`: query it with any SQL tool."""

    requires: ClassVar[OptionalPackage | None] = None  # SQLAlchemy is a core dependency

    def __init__(self, context: SinkContext, *, url: str | None = None) -> None:
        from rft.storage.sql_database import Column, SqlDatabase

        if not url:
            context.monitor_dir.mkdir(parents=True, exist_ok=True)
            url = f"sqlite:///{(context.monitor_dir / 'metrics.db').resolve()}"
        self.url = url
        self.database = SqlDatabase(url, key="the sql sink's url")
        try:
            self.table = self.database.create_table(
                "rft_metrics",
                [
                    Column("component", "string", 64, nullable=False),
                    Column("run", "string", 128, nullable=False),
                    Column("step", "int32", nullable=False),
                    Column("name", "string", 128, nullable=False),
                    Column("value", "float64", nullable=False),
                    Column("timestamp", "int64", nullable=False),
                ],
            )
        except StorageError as exc:  # the database's SqlError
            self.database.close()
            raise MetricSinkError(f"{TYPE_KEY}: sink 'sql' cannot open: {exc}") from exc
        self._pending: list[dict[str, Any]] = []

    def write(self, metric: Metric) -> None:
        self._pending.extend(
            {
                "component": metric.component,
                "run": metric.run,
                "step": metric.step,
                "name": k,
                "value": float(v),
                "timestamp": metric.timestamp,
            }
            for k, v in metric.values.items()
        )

    def flush(self) -> None:
        if self._pending:
            try:  # one transaction per flushed batch
                self.database.insert(self.table, self._pending)
            except StorageError as exc:  # the database's SqlError
                raise MetricSinkError(f"sink 'sql' cannot flush: {exc}") from exc
            self._pending.clear()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.database.close()


_UNSAFE_PATH_CHARS = re.compile(r"[^A-Za-z0-9._-]")


@METRIC_SINKS.register("tensorboard")
class TensorBoardSink:
    """Scalars tagged `<component>/<name>` at step = metric.step, wall time = metric timestamp.

    Each component gets its own run directory under `log_dir`: an explorer and a trainer process
    of a split setup then never write event files into one directory (TensorBoard reads the files
    of a directory one after the other, so two files growing side by side lose points).
    """

    requires: ClassVar[OptionalPackage | None] = OptionalPackage("tensorboard", "tensorboard")

    def __init__(self, context: SinkContext, *, log_dir: str | None = None) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event_pb2, self._summary_pb2 = event_pb2, summary_pb2
        self._writer_class = EventFileWriter
        self.log_dir = Path(log_dir) if log_dir else context.monitor_dir / "tensorboard"
        self._writers: dict[str, Any] = {}

    def _writer(self, component: str) -> Any:
        writer = self._writers.get(component)
        if writer is None:
            run_dir = self.log_dir / (_UNSAFE_PATH_CHARS.sub("_", component).strip(".") or "_")
            writer = self._writers[component] = self._writer_class(str(run_dir))
        return writer

    def write(self, metric: Metric) -> None:
        summary = self._summary_pb2.Summary(
            value=[
                self._summary_pb2.Summary.Value(tag=f"{metric.component}/{k}", simple_value=v)
                for k, v in metric.values.items()
            ]
        )
        event = self._event_pb2.Event(
            wall_time=metric.timestamp / 1000.0, step=metric.step, summary=summary
        )
        self._writer(metric.component).add_event(event)

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()


@METRIC_SINKS.register("wandb")
class WandbSink:
    """A Weights & Biases run in offline mode (`wandb sync <dir>/wandb/offline-run-*` uploads it).

    Components count steps on their own, so each gets its own x axis `<component>/step`.
    """

    requires: ClassVar[OptionalPackage | None] = OptionalPackage("wandb", "wandb")

    def __init__(self, context: SinkContext, *, dir: str | None = None) -> None:
        import wandb

        root = Path(dir) if dir else context.monitor_dir
        root.mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            project=context.project, name=context.name, dir=str(root), mode="offline"
        )
        self._axes: set[str] = set()

    def write(self, metric: Metric) -> None:
        axis = f"{metric.component}/step"
        if metric.component not in self._axes:
            self._run.define_metric(axis)
            self._run.define_metric(f"{metric.component}/*", step_metric=axis)
            self._axes.add(metric.component)
        values = {f"{metric.component}/{k}": v for k, v in metric.values.items()}
        self._run.log({axis: metric.step, **values})

    def flush(self) -> None:
        pass  # wandb's own process writes the run files; finish() waits for them

    def close(self) -> None:
        self._run.finish()


@METRIC_SINKS.register("mlflow")
class MlflowSink:
    """An MLflow run named after the config's `name` in experiment `project`; keys
    `<component>/<name>`. The default tracking URI is a local SQLite file, so nothing leaves the
    machine (`mlflow ui --backend-store-uri sqlite:///…/mlflow.db` shows it)."""

    requires: ClassVar[OptionalPackage | None] = OptionalPackage("mlflow", "mlflow")

    _BATCH = 1000  # MLflow's limit of metrics per log_batch call

    def __init__(self, context: SinkContext, *, tracking_uri: str | None = None) -> None:
        from mlflow.entities import Metric as MlflowMetric
        from mlflow.tracking import MlflowClient

        if not tracking_uri:
            # a local SQLite store: recent MLflow refuses a `file:` store unless the
            # MLFLOW_ALLOW_FILE_STORE environment variable opts in (it still works when given)
            context.monitor_dir.mkdir(parents=True, exist_ok=True)
            tracking_uri = f"sqlite:///{(context.monitor_dir / 'mlflow.db').resolve()}"
        self._metric_class = MlflowMetric
        self._client = MlflowClient(tracking_uri=tracking_uri)
        experiment = self._client.get_experiment_by_name(context.project)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self._client.create_experiment(context.project)
        )
        self._run_id = self._client.create_run(experiment_id, run_name=context.name).info.run_id
        self._pending: list[Any] = []

    def write(self, metric: Metric) -> None:
        self._pending.extend(
            self._metric_class(f"{metric.component}/{k}", v, metric.timestamp, metric.step)
            for k, v in metric.values.items()
        )

    def flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[: self._BATCH], self._pending[self._BATCH :]
            self._client.log_batch(self._run_id, metrics=batch)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._client.set_terminated(self._run_id)


class SinkConfigError(ConfigError):
    """A problem in the `monitor` section; `key` is the dotted config key at fault, so the loader
    can name the file and line."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def sink_options(cls: type[Any]) -> dict[str, Any]:
    """The settings a sink class takes: its constructor's keyword-only parameters and their types."""
    hints = typing.get_type_hints(cls.__init__)
    params = inspect.signature(cls.__init__).parameters.values()
    return {p.name: hints.get(p.name, Any) for p in params if p.kind is p.KEYWORD_ONLY}


def sink_settings(names: Sequence[str], args: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each selected sink's settings from `monitor_args`, checked and converted to their types.

    `args` is either per sink (`{tensorboard: {log_dir: x}}`) or, with exactly one sink, flat
    (`{log_dir: x}`). Raises SinkConfigError naming the `monitor.monitor_args` key at fault.
    """
    args = dict(args or {})
    per_sink = [k for k in args if k in METRIC_SINKS]
    flat = [k for k in args if k not in METRIC_SINKS]
    if per_sink and flat:
        raise SinkConfigError(
            ARGS_KEY,
            f"{ARGS_KEY} mixes per-sink sections ({', '.join(per_sink)}) with plain settings "
            f"({', '.join(flat)}); put every setting under the name of its sink",
        )
    if flat:
        if len(names) != 1:
            example = f"{names[0] if names else '<sink>'}: {{{flat[0]}: ...}}"
            raise SinkConfigError(
                ARGS_KEY,
                f"{ARGS_KEY}: with {len(names)} sinks ({', '.join(names) or 'none'}) selected, "
                f"give each sink's settings under its name (`{example}`)",
            )
        args = {names[0]: args}
    for name in args:
        if name not in names:
            raise SinkConfigError(
                f"{ARGS_KEY}.{name}",
                f"{ARGS_KEY}.{name}: settings for sink {name!r}, which {TYPE_KEY} does not select "
                f"(selected: {', '.join(names) or 'none'})",
            )
    binder = ConfigBinder()
    settings: dict[str, dict[str, Any]] = {}
    for name in names:
        raw = args.get(name) or {}
        path = f"{ARGS_KEY}.{name}" if not flat else ARGS_KEY
        if not isinstance(raw, Mapping):
            raise SinkConfigError(path, f"{path}: expected a mapping of settings, got {raw!r}")
        options = sink_options(METRIC_SINKS.get(name))
        converted: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in options:
                close = difflib.get_close_matches(str(key), list(options), n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise SinkConfigError(
                    f"{path}.{key}",
                    f"{path}.{key}: sink {name!r} has no setting {key!r}{hint} "
                    f"(its settings: {', '.join(options) or 'none'})",
                )
            converted[key] = binder.convert(options[key], value, f"{path}.{key}")
        if binder.issues:
            first = binder.issues[0]
            raise SinkConfigError(first.path, f"{first.path}: {first.message}")
        assert MISSING_VALUE not in converted.values()
        settings[name] = converted
    return settings


def check_sinks(names: Sequence[str], args: Mapping[str, Any]) -> None:
    """Refuse at load what would fail when the sinks open: an unknown or repeated sink name, a sink
    whose optional package is not installed (naming the `pip install`), settings that no selected
    sink takes. Raises SinkConfigError (a ConfigError) whose `key` is the config key at fault."""
    seen: set[str] = set()
    for name in names:
        try:
            cls = METRIC_SINKS.get(name)
        except ConfigError as exc:  # the registry's message names the close match
            raise SinkConfigError(TYPE_KEY, str(exc)) from exc
        if name in seen:
            raise SinkConfigError(TYPE_KEY, f"{TYPE_KEY}: {name!r} is listed twice")
        seen.add(name)
        package: OptionalPackage | None = getattr(cls, "requires", None)
        if package is not None and importlib.util.find_spec(package.module) is None:
            raise SinkConfigError(
                TYPE_KEY,
                f"{TYPE_KEY}: sink {name!r} needs the package {package.pip!r}, which is not "
                f"installed: pip install {package.pip}",
            )
    sink_settings(names, args)


class MetricFanout:
    """Writes each metric to every sink; flushes and closes them all, even when one fails."""

    def __init__(self, sinks: Mapping[str, MetricSink]) -> None:
        self.sinks = dict(sinks)

    @classmethod
    def open(
        cls, names: Sequence[str], args: Mapping[str, Any], context: SinkContext
    ) -> MetricFanout:
        """Check the sinks as `check_sinks` does, then open them (closing the opened ones again
        when a later one fails to open)."""
        check_sinks(names, args)
        opened = cls({})
        try:
            for name, options in sink_settings(names, args).items():
                try:
                    opened.sinks[name] = METRIC_SINKS.get(name)(context, **options)
                except RftError:
                    raise
                except Exception as exc:
                    raise MetricSinkError(f"{TYPE_KEY}: sink {name!r} cannot open: {exc}") from exc
        except BaseException:
            opened.close()
            raise
        return opened

    @classmethod
    def for_config(cls, cfg: RftConfig) -> MetricFanout:
        return cls.open(
            cfg.monitor.monitor_type, cfg.monitor.monitor_args, SinkContext.for_config(cfg)
        )

    @property
    def names(self) -> list[str]:
        return list(self.sinks)

    def write(self, metric: Metric) -> None:
        self._each("write", metric)

    def flush(self) -> None:
        self._each("flush")

    def close(self) -> None:
        failures: list[BaseException] = []
        for name, sink in self.sinks.items():
            try:
                sink.close()
            except Exception as exc:  # the other sinks still close
                failures.append(MetricSinkError(f"sink {name!r} cannot close: {exc}"))
                failures[-1].__cause__ = exc
        self.sinks.clear()
        if failures:
            raise failures[0]

    def _each(self, method: str, *args: Any) -> None:
        for name, sink in self.sinks.items():
            try:
                getattr(sink, method)(*args)
            except RftError:
                raise
            except Exception as exc:
                raise MetricSinkError(f"sink {name!r} cannot {method}: {exc}") from exc

    def __enter__(self) -> MetricFanout:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
