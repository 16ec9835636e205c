"""Tracer provider setup for rft processes, with span exporters chosen by name.

`configure_tracing(service, exporter)` builds a TracerProvider for one component (explorer,
trainer, CLI), installs it globally unless told not to, and returns it. Exporters come from the
`SPAN_EXPORTERS` registry: "none", "console", "memory" (tests) and "otlp" (needs the optional
`opentelemetry-exporter-otlp-proto-http` package).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rft.errors import ConfigError
from rft.registry import Registry

# An exporter factory takes the exporter's options (e.g. endpoint) and returns a SpanExporter,
# or None for "record nothing".
ExporterFactory = Callable[[dict[str, Any]], SpanExporter | None]

SPAN_EXPORTERS: Registry[ExporterFactory] = Registry("monitor.trace_exporter")


@SPAN_EXPORTERS.register("none")
def no_exporter(options: dict[str, Any]) -> SpanExporter | None:
    return None


@SPAN_EXPORTERS.register("console")
def console_exporter(options: dict[str, Any]) -> SpanExporter | None:
    return ConsoleSpanExporter()


@SPAN_EXPORTERS.register("memory")
def memory_exporter(options: dict[str, Any]) -> SpanExporter | None:
    return InMemorySpanExporter()


@SPAN_EXPORTERS.register("otlp")
def otlp_exporter(options: dict[str, Any]) -> SpanExporter | None:
    try:
        module = importlib.import_module("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    except ModuleNotFoundError as exc:
        raise ConfigError(
            "monitor.trace_exporter: 'otlp' needs the package opentelemetry-exporter-otlp-proto-http "
            "(pip install 'rft[otlp]')"
        ) from exc
    return module.OTLPSpanExporter(**options)


def configure_tracing(
    service_name: str,
    exporter: str = "none",
    *,
    options: dict[str, Any] | None = None,
    install_global: bool = True,
    batch: bool = True,
) -> TracerProvider:
    """A TracerProvider for `service_name` exporting through `exporter`.

    `batch=False` exports each span as it ends (tests, short CLI runs). With `install_global`,
    `opentelemetry.trace.get_tracer` returns tracers of this provider; OpenTelemetry allows that
    only once per process, so later calls keep the first global provider.
    """
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    span_exporter = SPAN_EXPORTERS.get(exporter)(dict(options or {}))
    if span_exporter is not None:
        processor = (
            BatchSpanProcessor(span_exporter) if batch else SimpleSpanProcessor(span_exporter)
        )
        provider.add_span_processor(processor)
    if install_global:
        trace.set_tracer_provider(provider)
    return provider
