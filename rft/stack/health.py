"""Liveness probes that need no client library: a TCP connect, a Kafka ApiVersions round trip
over a plain socket, and an HTTP GET.

ApiVersions (key 18) v0 is the request every Kafka client sends first; brokers keep answering it
across versions, and the broker only accepts client connections once it has started.
"""

from __future__ import annotations

import socket
import struct
import urllib.error
import urllib.request
from dataclasses import dataclass

_API_VERSIONS_KEY = 18
_PRODUCE_KEY = 0
_METADATA_KEY = 3


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str


def tcp_open(host: str, port: int, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def encode_api_versions_request(correlation_id: int, client_id: str) -> bytes:
    cid = client_id.encode()
    body = struct.pack(">hhih", _API_VERSIONS_KEY, 0, correlation_id, len(cid)) + cid
    return struct.pack(">i", len(body)) + body


def decode_api_versions_response(payload: bytes, correlation_id: int) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 response body -> {api_key: (min_version, max_version)}."""
    if len(payload) < 10:
        raise ValueError(f"response of {len(payload)} bytes is too short")
    corr, error_code, count = struct.unpack_from(">ihi", payload, 0)
    if corr != correlation_id:
        raise ValueError(f"correlation id {corr}, expected {correlation_id}")
    if error_code != 0:
        raise ValueError(f"error code {error_code}")
    if count < 0 or len(payload) < 10 + 6 * count:
        raise ValueError(f"{count} api entries do not fit in {len(payload)} bytes")
    apis = {}
    for i in range(count):
        key, lo, hi = struct.unpack_from(">hhh", payload, 10 + 6 * i)
        apis[key] = (lo, hi)
    return apis


def kafka_api_versions(host: str, port: int, timeout_s: float = 2.0) -> Probe:
    correlation_id = 0x52465400  # arbitrary; echoed back by the broker
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(encode_api_versions_request(correlation_id, "rft-stack-health"))
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            if not 0 < size < 1 << 20:
                return Probe(False, f"ApiVersions: absurd response size {size}")
            apis = decode_api_versions_response(_recv_exact(sock, size), correlation_id)
    except (OSError, ConnectionError) as exc:
        return Probe(False, f"no ApiVersions answer from {host}:{port}: {exc}")
    except ValueError as exc:
        return Probe(False, f"bad ApiVersions answer from {host}:{port}: {exc}")
    missing = {_PRODUCE_KEY, _METADATA_KEY} - apis.keys()
    if missing:
        return Probe(False, f"broker at {host}:{port} lacks APIs {sorted(missing)}")
    return Probe(True, f"ApiVersions ok ({len(apis)} APIs)")


def http_ok(url: str, timeout_s: float = 2.0) -> Probe:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return Probe(resp.status == 200, f"GET {url} -> {resp.status}")
    except urllib.error.HTTPError as exc:
        return Probe(False, f"GET {url} -> {exc.code}")
    except (OSError, urllib.error.URLError) as exc:
        return Probe(False, f"GET {url} failed: {exc}")
