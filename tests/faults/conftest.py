"""`private_stack`: a LocalStack of the fault tests' own (private root and free ports), one per
test module, so that stopping or killing its Kafka or MinIO disturbs no test that shares the
session stack."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rft.config.connections import LocalStackSettings
from rft.stack.local_stack import LocalStack


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.fixture(scope="module")
def private_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    kafka, controller, minio, console = free_ports(4)
    settings = LocalStackSettings(
        root=Path(tmp_path_factory.mktemp("stack")),
        kafka_port=kafka,
        kafka_controller_port=controller,
        minio_port=minio,
        minio_console_port=console,
    )
    local = LocalStack(settings)
    local.up(timeout_s=180)
    try:
        yield local
    finally:
        local.down()
