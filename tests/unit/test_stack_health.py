"""Health probes without a client library: the ApiVersions wire format, TCP and HTTP checks, and
the port check `LocalStack.up` makes before starting anything."""

from __future__ import annotations

import contextlib
import http.server
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.config.connections import LocalStackSettings
from rft.errors import StackError
from rft.stack.health import (
    decode_api_versions_response,
    encode_api_versions_request,
    http_ok,
    tcp_open,
)
from rft.stack.local_stack import LocalStack

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)


@given(correlation_id=int32, client_id=st.text(max_size=30))
def test_api_versions_request_layout(correlation_id: int, client_id: str) -> None:
    frame = encode_api_versions_request(correlation_id, client_id)
    (size,) = struct.unpack_from(">i", frame, 0)
    assert size == len(frame) - 4
    key, version, corr, id_len = struct.unpack_from(">hhih", frame, 4)
    assert (key, version, corr) == (18, 0, correlation_id)
    assert frame[14:].decode() == client_id and id_len == len(client_id.encode())


@given(correlation_id=int32, apis=st.dictionaries(int16, st.tuples(int16, int16), max_size=80))
def test_api_versions_response_round_trips(
    correlation_id: int, apis: dict[int, tuple[int, int]]
) -> None:
    body = struct.pack(">ihi", correlation_id, 0, len(apis))
    body += b"".join(struct.pack(">hhh", k, lo, hi) for k, (lo, hi) in apis.items())
    assert decode_api_versions_response(body, correlation_id) == apis


@given(data=st.binary(max_size=64), correlation_id=int32)
def test_garbage_responses_raise_value_error_only(data: bytes, correlation_id: int) -> None:
    with contextlib.suppress(ValueError):
        decode_api_versions_response(data, correlation_id)


def test_wrong_correlation_or_error_code_is_rejected() -> None:
    body = struct.pack(">ihi", 7, 0, 0)
    with pytest.raises(ValueError, match="correlation"):
        decode_api_versions_response(body, 8)
    with pytest.raises(ValueError, match="error code 35"):
        decode_api_versions_response(struct.pack(">ihi", 7, 35, 0), 7)


@pytest.fixture
def listener() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock.getsockname()[1]
    sock.close()


def test_tcp_open_sees_a_listener_and_not_a_closed_port(listener: int) -> None:
    assert tcp_open("127.0.0.1", listener)
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    closed = probe.getsockname()[1]
    probe.close()
    assert not tcp_open("127.0.0.1", closed)


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200 if self.path == "/minio/health/live" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_http_probe_reports_status_codes() -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        assert http_ok(f"{base}/minio/health/live").ok
        bad = http_ok(f"{base}/other")
        assert not bad.ok and "503" in bad.detail
    finally:
        server.shutdown()
        server.server_close()
    assert not http_ok(f"{base}/minio/health/live", timeout_s=0.5).ok


def test_up_refuses_a_port_held_by_a_foreign_process(listener: int, tmp_path: Path) -> None:
    settings = LocalStackSettings(
        root=tmp_path / "stack",
        kafka_port=listener,
        kafka_controller_port=1,
        minio_port=1,
        minio_console_port=1,
    )
    stack = LocalStack(settings, cache_dir=tmp_path / "cache")
    with pytest.raises(StackError, match=f"kafka: port 127.0.0.1:{listener} is already in use"):
        stack.up(timeout_s=1)
    assert stack.status().running == ()
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
