"""The `otlp` trace exporter speaks OTLP, over http/protobuf and over grpc, to the endpoint the
standard OTEL_EXPORTER_OTLP_* variables name (as docker-compose.yml sets them for the collector).

Each test runs an OTLP trace receiver built on the protocol's own definitions (the
`opentelemetry-proto` messages and gRPC service) and checks that rft's spans arrive with their
names, ids and `service.name`. The exporters' packages are in the default install (`make setup`
installs the `traces` extra), so these tests run in `make test`: a missing one fails them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from rft.tracing.setup import configure_tracing


def received_spans(requests: list[Any]) -> list[tuple[str, str, bytes]]:
    """(service.name, span name, trace id) of every span in the received export requests."""
    out = []
    for request in requests:
        for resource_spans in request.resource_spans:
            service = next(
                a.value.string_value
                for a in resource_spans.resource.attributes
                if a.key == "service.name"
            )
            for scope in resource_spans.scope_spans:
                out.extend((service, s.name, s.trace_id) for s in scope.spans)
    return out


def export_one_span(monkeypatch: pytest.MonkeyPatch, protocol: str, endpoint: str) -> bytes:
    """Configure `otlp` from the OTEL variables alone, end one span, flush; its trace id."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    provider = configure_tracing("rft-explorer", "otlp", install_global=False)
    with provider.get_tracer("t").start_as_current_span("explorer.rollout") as span:
        trace_id = span.get_span_context().trace_id.to_bytes(16, "big")
    provider.shutdown()  # flushes the batch processor
    return trace_id


@pytest.fixture
def http_receiver() -> Iterator[tuple[str, list[Any]]]:
    got: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces":
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                got.append(request)
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()


def test_otlp_over_http_protobuf_reaches_the_endpoint(
    monkeypatch: pytest.MonkeyPatch, http_receiver: tuple[str, list[Any]]
) -> None:
    endpoint, got = http_receiver
    trace_id = export_one_span(monkeypatch, "http/protobuf", endpoint)
    assert received_spans(got) == [("rft-explorer", "explorer.rollout", trace_id)]


def test_otlp_over_grpc_reaches_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[Any] = []

    class Receiver(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
        def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 (the proto's name)
            got.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        trace_id = export_one_span(monkeypatch, "grpc", f"http://127.0.0.1:{port}")
    finally:
        server.stop(grace=None)
    assert received_spans(got) == [("rft-explorer", "explorer.rollout", trace_id)]
