"""Tracer provider setup for rft processes, with span exporters chosen by name.

`configure_tracing(service, exporter, options)` builds a TracerProvider for one component
(publisher, explorer, trainer, feeder), installs it globally unless told not to, and returns it;
`configure_from_monitor` does the same from the `monitor` section (`trace_exporter`,
`trace_args`). Exporters come from the `SPAN_EXPORTERS` registry, each a function of its
`trace_args` as keywords:

- `none` (the default): spans are not recorded, but they get ids, so the W3C context (marked
  unsampled) still rides in Kafka headers; nothing is sent anywhere;
- `console`: each span printed as JSON on stdout;
- `file`: JSON lines appended to `path` (`rft.tracing.file_exporter`; default
  `<checkpoint_root_dir>/<project>/<name>/traces.jsonl`), which every process of a run may share;
- `otlp`: OTLP to a collector, over `http/protobuf` or `grpc` as `protocol` (or the standard
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL / OTEL_EXPORTER_OTLP_PROTOCOL) says; the endpoint, headers
  and timeout come from `trace_args` or the standard OTEL_EXPORTER_OTLP_* variables. Its package
  is imported only when selected, and `check_exporter` refuses it at load when it is missing;
- `zipkin`: Zipkin's JSON v2 posted to a Zipkin server (`rft.tracing.zipkin_exporter`, which keeps
  span links as a tag); `endpoint` defaults to OTEL_EXPORTER_ZIPKIN_ENDPOINT, else the local
  stack's server (`http://127.0.0.1:<stack.local.zipkin_port>/api/v2/spans`), which `rft run`
  then starts beside Kafka and MinIO. Its package (`opentelemetry-exporter-zipkin-json`) is
  checked at load like otlp's;
- `memory`: kept in memory (tests).

A user adds an exporter with one function: `@SPAN_EXPORTERS.register("name")`. Traits an entry
may declare: `defaults` (a function of the run config giving `trace_args` defaults),
`stack_service` (a function of the exporter's options and `stack.local` naming the local stack
service the spans go to, or None) and `viewer` (a function of the options giving where a person
looks at the spans, for `rft status` and the run summary).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

from rft.config.connections import LocalStackSettings
from rft.errors import ConfigError
from rft.registry import PartSpec, Registry, unknown_arguments
from rft.stack.zipkin_server import spans_url
from rft.tracing.file_exporter import JsonLinesSpanExporter
from rft.tracing.process_provider import install

if TYPE_CHECKING:
    from rft.config.schema import RftConfig

# An exporter factory takes its `monitor.trace_args` as keyword arguments and returns a
# SpanExporter, or None for "record nothing".
ExporterFactory = Callable[..., SpanExporter | None]


@dataclass(frozen=True)
class SpanExporterSpec(PartSpec):
    """What a span exporter's entry declares, each a function or None.

    - `defaults(cfg) -> dict`: trace_args it takes when the config gives none (the file
      exporter's path in the run's job dir, zipkin's endpoint on the local stack);
    - `stack_service(options, local) -> str | None`: the local stack service its spans go to,
      for `rft run` to start;
    - `viewer(options) -> str | None`: where a person looks at the spans (a web UI, a file);
    - `package(trace_args) -> (module, pip package)`: what the exporter imports when built,
      checked at load.
    """

    defaults: Callable[..., dict[str, Any]] | None = None
    stack_service: Callable[..., str | None] | None = None
    viewer: Callable[..., str | None] | None = None
    package: Callable[[Mapping[str, Any]], tuple[str, str]] | None = None


SPAN_EXPORTERS: Registry[ExporterFactory, SpanExporterSpec] = Registry(
    "monitor.trace_exporter", SpanExporterSpec
)

# the resource attribute naming the run (`<project>.<name>`) a process's spans belong to
RUN_ATTRIBUTE = "rft.run"
# A train step links to every experience it trained on; the SDK's default keeps 128 links.
MAX_LINKS = 1 << 16
# Spans waiting for a batch exporter (the SDK's default, 2048, is below one publish of a taskset)
QUEUE_SIZE = 1 << 15

_OTLP_MODULES = {
    "http/protobuf": (
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry-exporter-otlp-proto-http",
    ),
    "grpc": (
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        "opentelemetry-exporter-otlp-proto-grpc",
    ),
}


@SPAN_EXPORTERS.register("none")
def no_exporter() -> SpanExporter | None:
    return None


@SPAN_EXPORTERS.register("console")
def console_exporter() -> SpanExporter | None:
    return ConsoleSpanExporter(out=sys.stdout)  # the stdout of now, not of import time


@SPAN_EXPORTERS.register("memory")
def memory_exporter() -> SpanExporter | None:
    return InMemorySpanExporter()


def _file_defaults(cfg: RftConfig) -> dict[str, Any]:
    return {"path": str(cfg.job_dir / "traces.jsonl")}


def _file_viewer(options: Mapping[str, Any]) -> str:
    return f"{options['path']} (JSON lines)"


@SPAN_EXPORTERS.register("file", defaults=_file_defaults, viewer=_file_viewer)
def file_exporter(path: str) -> SpanExporter | None:
    return JsonLinesSpanExporter(path)


ZIPKIN_PACKAGE = ("opentelemetry.exporter.zipkin.json", "opentelemetry-exporter-zipkin-json")


def _zipkin_defaults(cfg: RftConfig) -> dict[str, Any]:
    endpoint = os.environ.get("OTEL_EXPORTER_ZIPKIN_ENDPOINT") or spans_url(
        cfg.stack.local.zipkin_port
    )
    return {"endpoint": endpoint}


def _zipkin_stack_service(options: Mapping[str, Any], local: LocalStackSettings) -> str | None:
    return "zipkin" if options.get("endpoint") == spans_url(local.zipkin_port) else None


def _zipkin_viewer(options: Mapping[str, Any]) -> str | None:
    endpoint = options.get("endpoint")
    if not endpoint:
        return None
    # the server that takes /api/v2/spans serves its UI at /zipkin/ of the same address
    parts = urllib.parse.urlsplit(str(endpoint))
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/zipkin/", "", ""))


@SPAN_EXPORTERS.register(
    "zipkin",
    defaults=_zipkin_defaults,
    stack_service=_zipkin_stack_service,
    viewer=_zipkin_viewer,
    package=lambda args: ZIPKIN_PACKAGE,
)
def zipkin_exporter(endpoint: str | None = None, timeout: int | None = None) -> SpanExporter | None:
    """`endpoint`: the server's span URL (`http://host:9411/api/v2/spans`); `timeout`: seconds
    per batch posted."""
    module_name, package = ZIPKIN_PACKAGE
    try:
        module = importlib.import_module("rft.tracing.zipkin_exporter")
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"monitor.trace_exporter: 'zipkin' needs the package {package} "
            f"(pip install {package}, or pip install 'rft[traces]')"
        ) from exc
    chosen = (
        endpoint
        or os.environ.get("OTEL_EXPORTER_ZIPKIN_ENDPOINT")
        or spans_url(LocalStackSettings().zipkin_port)
    )
    exporter: SpanExporter = module.link_tagging_zipkin_exporter(chosen, timeout)
    return exporter


def _otlp_package(args: Mapping[str, Any]) -> tuple[str, str]:
    return _OTLP_MODULES[otlp_protocol(args.get("protocol"))]


def otlp_protocol(protocol: str | None = None) -> str:
    """The OTLP protocol: the argument, else the standard OTEL variables, else http/protobuf."""
    chosen = (
        protocol
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if chosen not in _OTLP_MODULES:
        raise ConfigError(
            f"monitor.trace_args.protocol: OTLP protocol {chosen!r} is not one of "
            f"{', '.join(_OTLP_MODULES)}"
        )
    return chosen


@SPAN_EXPORTERS.register("otlp", package=_otlp_package)
def otlp_exporter(
    protocol: str | None = None,
    endpoint: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float | None = None,
    insecure: bool | None = None,
) -> SpanExporter | None:
    """`endpoint`: the full traces URL for http/protobuf (`http://host:4318/v1/traces`), host:port
    for grpc; left out, the exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT."""
    chosen = otlp_protocol(protocol)
    module_name, package = _OTLP_MODULES[chosen]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"monitor.trace_exporter: 'otlp' over {chosen} needs the package {package} "
            f"(pip install {package}, or pip install 'rft[traces]')"
        ) from exc
    options: dict[str, Any] = {"endpoint": endpoint, "timeout": timeout}
    if headers is not None:
        options["headers"] = dict(headers)
    if chosen == "grpc" and insecure is not None:
        options["insecure"] = insecure
    return module.OTLPSpanExporter(**{k: v for k, v in options.items() if v is not None})


def _importable(module_name: str) -> bool:
    try:
        return importlib.util.find_spec(module_name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def check_exporter(name: str, args: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(config key, problem) for `monitor.trace_exporter` / `trace_args`: an unknown name, an
    argument its exporter does not take, or the optional package it needs missing."""
    try:
        factory = SPAN_EXPORTERS.get(name)
    except ConfigError as exc:
        return [("monitor.trace_exporter", str(exc))]
    unknown, accepted = unknown_arguments(factory, args)
    problems = [
        (
            f"monitor.trace_args.{arg}",
            f"is not a setting of trace exporter {name!r} (accepts: {', '.join(accepted) or 'none'})",
        )
        for arg in unknown
    ]
    needs = SPAN_EXPORTERS.spec(name).package
    if needs is not None and not unknown:
        try:
            module_name, package = needs(args)
        except ConfigError as exc:
            return [("monitor.trace_args.protocol", str(exc).split(": ", 1)[1])]
        if not _importable(module_name):
            problems.append(
                (
                    "monitor.trace_exporter",
                    f"{name!r} needs the package {package} (pip install {package}, "
                    "or pip install 'rft[traces]')",
                )
            )
    return problems


def configure_tracing(
    service_name: str,
    exporter: str = "none",
    *,
    options: Mapping[str, Any] | None = None,
    install_global: bool = True,
    batch: bool = True,
    run: str | None = None,
) -> TracerProvider:
    """A TracerProvider for `service_name` exporting through `exporter` (with `options`).

    `run` (`<project>.<name>`) becomes the resource attribute `rft.run` of every span, so a
    trace store shared by several runs finds one run's traces (Zipkin: a tag search `rft.run=...`).

    `batch=False` exports each span as it ends (tests), as an exporter whose class sets
    `synchronous = True` (the file exporter) always does. With `install_global`,
    `opentelemetry.trace.get_tracer` returns tracers of this provider, and tracers taken before
    follow it too (rft.tracing.process_provider: the stages of one `rft run` are runs of their
    own). The provider flushes its spans when the process exits.
    """
    span_exporter = SPAN_EXPORTERS.get(exporter)(**dict(options or {}))
    provider = TracerProvider(
        # Exporting nowhere, spans are not recorded (a recorded span costs several times more,
        # per task, than publishing it), but they still get ids, so the W3C context, marked
        # unsampled, rides in Kafka headers. Exporting, every span is recorded, whatever the
        # parent's flag: a process that exports keeps its spans even below an untraced one.
        sampler=ALWAYS_ON if span_exporter is not None else ALWAYS_OFF,
        resource=Resource.create(
            {"service.name": service_name, **({RUN_ATTRIBUTE: run} if run else {})}
        ),
        span_limits=SpanLimits(max_links=MAX_LINKS),
    )
    if span_exporter is not None:
        # an exporter that only appends locally writes each span as it ends and loses none; a
        # remote one exports in batches from a queue (a burst beyond it is dropped, with a warning)
        synchronous = not batch or getattr(span_exporter, "synchronous", False)
        processor = (
            SimpleSpanProcessor(span_exporter)
            if synchronous
            else BatchSpanProcessor(span_exporter, max_queue_size=QUEUE_SIZE)
        )
        provider.add_span_processor(processor)
    if install_global:
        install(provider)
    return provider


def trace_options(cfg: RftConfig) -> dict[str, Any]:
    """`monitor.trace_args` over the exporter's `defaults` trait (the `file` exporter's path in
    the run's job dir, the `zipkin` exporter's endpoint on the local stack)."""
    defaults = SPAN_EXPORTERS.spec(cfg.monitor.trace_exporter).defaults
    return {**(defaults(cfg) if defaults else {}), **cfg.monitor.trace_args}


def trace_stack_service(cfg: RftConfig) -> str | None:
    """The local stack service the run's spans go to (for `rft run` to start), or None."""
    service = SPAN_EXPORTERS.spec(cfg.monitor.trace_exporter).stack_service
    return service(trace_options(cfg), cfg.stack.local) if service else None


def trace_viewer(cfg: RftConfig) -> str | None:
    """Where a person looks at the run's spans (a web UI, a file), or None when nowhere."""
    viewer = SPAN_EXPORTERS.spec(cfg.monitor.trace_exporter).viewer
    return viewer(trace_options(cfg)) if viewer else None


def configure_from_monitor(component: str, cfg: RftConfig | None) -> TracerProvider:
    """The global provider of one rft process (`rft-<component>`), as `cfg.monitor` says; with
    no run config, as RFT_TRACE_EXPORTER says (no options)."""
    if cfg is None:
        return configure_tracing(f"rft-{component}", os.environ.get("RFT_TRACE_EXPORTER", "none"))
    return configure_tracing(
        f"rft-{component}",
        cfg.monitor.trace_exporter,
        options=trace_options(cfg),
        run=f"{cfg.project}.{cfg.name}",
    )
