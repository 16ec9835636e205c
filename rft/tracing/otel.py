"""The OpenTelemetry API that the rest of rft writes spans with, re-exported from here.

OpenTelemetry is imported by the modules of `rft.tracing` and by no other (an import contract in
pyproject.toml says so): the explorer, the trainer, the workflows and the event plane take the
tracer, span, link, status and context types from this module, so one package owns the tracing
dependency and its setup (`rft.tracing.setup`), propagation and exporters.
"""

from __future__ import annotations

from opentelemetry import context, trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
)

__all__ = [
    "Context",
    "Link",
    "NonRecordingSpan",
    "Span",
    "SpanContext",
    "SpanKind",
    "Status",
    "StatusCode",
    "context",
    "trace",
]
