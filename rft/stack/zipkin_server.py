"""The Zipkin server of the local stack: a trace store in memory, its query API (`/api/v2/...`)
and its web UI (`/zipkin/`), on 127.0.0.1 in one JVM.

Optional: `rft stack up` leaves it off unless asked (`--with zipkin`), or a run's trace exporter
sends spans to it. Spans live in memory only (`STORAGE_TYPE=mem`, the newest `MAX_SPANS` kept):
traces are for looking at a run, not a record; the record is the Kafka log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from rft.stack.health import http_ok
from rft.stack.java_runtime import java_runtime
from rft.stack.layout import StackLayout
from rft.stack.managed_server import ManagedServer
from rft.stack.provision_route import ProvisionContext
from rft.stack.zipkin_install import ZIPKIN_VERSION, zipkin_jar

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
# a run of a few hundred steps with every span recorded stays well inside this
MAX_SPANS = 500_000
# C1 only and a serial collector: it starts on less CPU on a small machine, and a trace viewer
# needs no peak throughput
JVM_OPTIONS: tuple[str, ...] = (
    "-Xmx512m",
    "-Xms64m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
)


def spans_url(port: int) -> str:
    """Where a Zipkin exporter posts spans (JSON v2) to the local stack's server."""
    return f"http://{HOST}:{port}/api/v2/spans"


def ui_url(port: int) -> str:
    return f"http://{HOST}:{port}/zipkin/"


class ZipkinServer(ManagedServer):
    name = "zipkin"
    optional = True

    def __init__(self, layout: StackLayout, port: int, ctx: ProvisionContext) -> None:
        super().__init__(layout)
        self.port = port
        self.ctx = ctx
        self._java: Path | None = None
        self._jar: Path | None = None

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.port,)

    @property
    def endpoint(self) -> str:
        return ui_url(self.port)

    def provision(self) -> None:
        self._java = java_runtime(self.ctx)
        self._jar = zipkin_jar(self.ctx)
        log.info("zipkin %s: java %s, jar %s", ZIPKIN_VERSION, self._java, self._jar)

    def command(self) -> tuple[Sequence[str], Mapping[str, str], str]:
        if self._java is None or self._jar is None:
            self.provision()
        # the marker: a property naming this root, so `down` stops only this stack's server
        marker = f"-Drft.stack.root={self.layout.root}"
        argv = [
            str(self._java),
            *JVM_OPTIONS,
            marker,
            "-jar",
            str(self._jar),
            f"--armeria.ports[0].port={self.port}",
            f"--armeria.ports[0].ip={HOST}",
            "--armeria.ports[0].protocols[0]=http",
        ]
        env = {"STORAGE_TYPE": "mem", "MEM_MAX_SPANS": str(MAX_SPANS)}
        return argv, env, marker

    def probe(self) -> tuple[bool, str]:
        result = http_ok(f"http://{HOST}:{self.port}/health")
        return result.ok, result.detail
