"""W3C trace context through Kafka header lists: inject, extract, continue the trace."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    TraceFlags,
    TraceState,
    get_current_span,
    set_span_in_context,
)

from rft.errors import ConfigError
from rft.tracing.propagation import extract_trace_context, inject_trace_headers
from rft.tracing.setup import SPAN_EXPORTERS, configure_tracing


def test_no_span_no_headers() -> None:
    assert inject_trace_headers([("rft-schema", b"x")]) == [("rft-schema", b"x")]


@given(
    trace_id=st.integers(min_value=1, max_value=2**128 - 1),
    span_id=st.integers(min_value=1, max_value=2**64 - 1),
    sampled=st.booleans(),
    vendor=st.from_regex(r"\A[a-z][a-z0-9]{0,10}\Z"),
    value=st.from_regex(r"\A[a-zA-Z0-9]{1,16}\Z"),
)
def test_round_trip_keeps_ids_flags_and_state(
    trace_id: int, span_id: int, sampled: bool, vendor: str, value: str
) -> None:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    sent = SpanContext(
        trace_id,
        span_id,
        is_remote=False,
        trace_flags=flags,
        trace_state=TraceState([(vendor, value)]),
    )
    headers = inject_trace_headers([("other", b"1")], set_span_in_context(NonRecordingSpan(sent)))
    assert [k for k, _ in headers] == ["other", "traceparent", "tracestate"]
    got = get_current_span(extract_trace_context(headers)).get_span_context()
    assert (got.trace_id, got.span_id, got.trace_flags) == (trace_id, span_id, flags)
    assert got.trace_state.get(vendor) == value
    assert got.is_remote


def test_injecting_twice_replaces_instead_of_duplicating() -> None:
    tracer = TracerProvider().get_tracer("t")
    headers: list[tuple[str, bytes]] = []
    with tracer.start_as_current_span("a"):
        inject_trace_headers(headers)
    with tracer.start_as_current_span("b") as b:
        inject_trace_headers(headers)
        current = b.get_span_context().span_id
    assert [k for k, _ in headers] == ["traceparent"]
    assert get_current_span(extract_trace_context(headers)).get_span_context().span_id == current


@pytest.mark.parametrize(
    "headers",
    [
        None,
        [],
        [("traceparent", b"garbage")],
        [("traceparent", b"00-00000000000000000000000000000000-0000000000000000-01")],
        [("traceparent", None)],
        [("traceparent", b"\xff\xfe")],
    ],
)
def test_missing_or_malformed_context_is_ignored(headers) -> None:
    context = extract_trace_context(headers)
    assert not get_current_span(context).get_span_context().is_valid


def test_consumer_span_continues_the_producer_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("explore"):
        headers = inject_trace_headers([])
    with tracer.start_as_current_span("train", context=extract_trace_context(headers)):
        pass
    explore, train = sorted(exporter.get_finished_spans(), key=lambda s: s.name)
    assert train.context.trace_id == explore.context.trace_id
    assert train.parent is not None and train.parent.span_id == explore.context.span_id


def test_configure_tracing_exports_through_a_registered_exporter() -> None:
    exporter = InMemorySpanExporter()

    @SPAN_EXPORTERS.register("unit-test-memory", replace=True)
    def unit_test_memory() -> InMemorySpanExporter:
        return exporter

    provider = configure_tracing("explorer", "unit-test-memory", install_global=False, batch=False)
    with provider.get_tracer("t").start_as_current_span("rollout"):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.name == "rollout"
    assert span.resource.attributes["service.name"] == "explorer"
    assert set(SPAN_EXPORTERS.names()) >= {"none", "console", "memory", "file", "otlp"}


def test_unknown_exporter_names_the_config_key() -> None:
    with pytest.raises(ConfigError, match="monitor.trace_exporter"):
        configure_tracing("x", "zipkin-ish", install_global=False)
