"""The real local stack on its own root and free ports (the session `stack` is left alone):
`up` is idempotent, `status` is healthy, `down` stops what `up` started, and data survives a
restart. The jars and the MinIO binary come from the shared cache, so only the first run builds."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rft.config.connections import LocalStackSettings
from rft.errors import StackError
from rft.stack import LocalStack
from rft.stack.health import tcp_open
from rft.stack.layout import default_cache_dir

pytestmark = pytest.mark.integration


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[LocalStack]:
    kafka, controller, minio, console = _free_ports(4)
    settings = LocalStackSettings(
        root=tmp_path / "stack",
        kafka_port=kafka,
        kafka_controller_port=controller,
        minio_port=minio,
        minio_console_port=console,
    )
    local = LocalStack(settings, cache_dir=default_cache_dir())
    yield local
    local.down()


def _snapshot(local: LocalStack) -> dict[str, str]:
    kafka_data = local.layout.data("kafka")
    minio_data = local.layout.data("minio")
    return {
        "meta.properties": (kafka_data / "meta.properties").read_text(),
        "cluster.id": (local.layout.root / "kafka-cluster.id").read_text(),
        "minio format": (minio_data / ".minio.sys" / "format.json").read_text(),
    }


def test_up_is_idempotent_down_stops_and_data_survives(own_stack: LocalStack) -> None:
    first = own_stack.up()
    assert first.started == ("kafka", "minio")
    assert first.status.healthy, first.status
    pids = {s.name: s.pid for s in first.status.services}
    assert (own_stack.layout.data("kafka") / "__cluster_metadata-0").is_dir()
    before = _snapshot(own_stack)

    again = own_stack.up()
    assert again.started == ()
    assert {s.name: s.pid for s in again.status.services} == pids

    assert own_stack.down() == ("minio", "kafka")
    status = own_stack.status()
    assert status.running == () and not status.healthy
    for port in (*own_stack.kafka.ports, *own_stack.minio.ports):
        assert not tcp_open("127.0.0.1", port)
    assert not any(own_stack.layout.run.glob("*.pid"))
    assert own_stack.down() == ()

    restarted = own_stack.up()
    assert restarted.started == ("kafka", "minio")
    assert restarted.status.healthy
    assert _snapshot(own_stack) == before  # same cluster, same MinIO deployment: not re-formatted


def test_a_broker_that_dies_on_start_is_reported_with_its_log(own_stack: LocalStack) -> None:
    own_stack.up()
    own_stack.down()
    meta = own_stack.layout.data("kafka") / "meta.properties"
    meta.write_text(meta.read_text().replace("node.id=1", "node.id=7"))
    with pytest.raises(StackError, match=r"kafka exited during start-up; logs: .*server\.log"):
        own_stack.up(timeout_s=90)
    assert own_stack.status().service("kafka").running is False


def test_up_can_start_one_service(own_stack: LocalStack) -> None:
    only = own_stack.up(services=["kafka"])
    assert only.started == ("kafka",)
    assert only.status.service("kafka").healthy
    assert not only.status.service("minio").running
    assert own_stack.up(services=["kafka", "minio"]).started == ("minio",)
    with pytest.raises(StackError, match=r"unknown stack services: \['zookeeper'\]"):
        own_stack.up(services=["zookeeper"])


def test_a_run_whose_spans_go_to_the_local_zipkin_starts_it_and_names_its_ui(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rft run`'s stack step with `monitor.trace_exporter: zipkin` (endpoint left to its default,
    the local stack's server) starts Zipkin, and only what the run needs: here its Kafka and
    checkpoint store are elsewhere. `rft stack status` then lists it with its UI's address, as the
    run summary does."""
    from rft.catalog import load_config
    from rft.cli.main import main as cli
    from rft.supervisor.run_supervisor import RunSummary, RunSupervisor
    from rft.tracing.setup import trace_viewer
    from tests.unit.config_samples import MINIMAL

    (port,) = _free_ports(1)
    root = tmp_path / "stack"
    config = tmp_path / "run.yaml"
    config.write_text(MINIMAL + "monitor:\n  trace_exporter: zipkin\n")
    overrides = [
        f"stack.local.root={root}",
        f"stack.local.zipkin_port={port}",
        "stack.kafka.bootstrap_servers=127.0.0.1:1",
        f"stack.object_store.uri=file://{tmp_path / 'store'}",
        f"checkpoint_root_dir={tmp_path / 'ck'}",
    ]
    cfg = load_config(config, overrides)
    local = LocalStack.from_stack_settings(cfg.stack, cache_dir=default_cache_dir())
    try:
        RunSupervisor(cfg, config, overrides).ensure_stack()
        status = local.status()
        assert [s.name for s in status.services if s.running] == ["zipkin"]
        assert status.service("zipkin").healthy
        ui = f"http://127.0.0.1:{port}/zipkin/"
        assert status.service("zipkin").endpoint == ui == trace_viewer(cfg)
        assert f"traces: {ui}" in RunSummary(traces=trace_viewer(cfg)).lines()
        capsys.readouterr()
        cli(["stack", "status", "--json", "--root", str(root), "--zipkin-port", str(port)])
        services = {s["name"]: s for s in json.loads(capsys.readouterr().out)["services"]}
        assert services["zipkin"]["healthy"] and services["zipkin"]["endpoint"] == ui
    finally:
        assert local.down() == ("zipkin",)
