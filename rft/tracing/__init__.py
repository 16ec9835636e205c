"""Tracing: W3C trace context carried in Kafka headers, and tracer setup per component.

One OpenTelemetry trace follows a task through rollout, experience, train step and weight sync
because every event written by `EventWriter` carries the writer's trace context.
"""

from rft.tracing.propagation import TRACE_HEADERS, extract_trace_context, inject_trace_headers

__all__ = ["TRACE_HEADERS", "extract_trace_context", "inject_trace_headers"]
