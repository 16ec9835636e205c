"""The `zipkin` trace exporter's settings and encoding, without a server: its endpoint defaults to
the local stack's Zipkin (which `rft run` then starts, and whose UI the summary names), a remote
endpoint starts nothing, and span links travel as the `rft.links` tag that Zipkin's model lacks.
Against the real server: tests/integration/test_trace_chain.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.exporter.zipkin.node_endpoint import NodeEndpoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, format_span_id, format_trace_id

from rft.catalog import load_config
from rft.config.connections import LocalStackSettings
from rft.errors import ConfigError
from rft.stack import LocalStack
from rft.tracing.setup import trace_options, trace_stack_service, trace_viewer
from rft.tracing.zipkin_exporter import LINKS_TAG, LinkTaggingEncoder, parse_link_references
from tests.unit.config_samples import MINIMAL


def load(tmp_path: Path, monitor: str) -> object:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL + f"checkpoint_root_dir: {tmp_path}/ck\nmonitor:\n{monitor}")
    return load_config(path)


def test_zipkin_defaults_to_the_local_stack_server_and_names_its_ui(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_ZIPKIN_ENDPOINT", raising=False)
    cfg = load(tmp_path, "  trace_exporter: zipkin\n")
    port = cfg.stack.local.zipkin_port
    assert trace_options(cfg) == {"endpoint": f"http://127.0.0.1:{port}/api/v2/spans"}
    assert trace_stack_service(cfg) == "zipkin"
    assert trace_viewer(cfg) == f"http://127.0.0.1:{port}/zipkin/"


def test_a_remote_zipkin_starts_nothing_locally_and_its_own_ui_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_ZIPKIN_ENDPOINT", "http://traces.example:9411/api/v2/spans")
    cfg = load(tmp_path, "  trace_exporter: zipkin\n")
    assert trace_stack_service(cfg) is None
    assert trace_viewer(cfg) == "http://traces.example:9411/zipkin/"
    cfg = load(
        tmp_path,
        "  trace_exporter: zipkin\n  trace_args: {endpoint: 'http://z:1/api/v2/spans'}\n",
    )
    assert trace_viewer(cfg) == "http://z:1/zipkin/"


def test_exporters_without_a_server_start_none(tmp_path: Path) -> None:
    cfg = load(tmp_path, "  trace_exporter: file\n")
    assert trace_stack_service(cfg) is None
    assert trace_viewer(cfg) == f"{cfg.job_dir / 'traces.jsonl'} (JSON lines)"
    cfg = load(tmp_path, "  trace_exporter: console\n")
    assert trace_stack_service(cfg) is None and trace_viewer(cfg) is None


def test_an_unknown_zipkin_setting_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"monitor\.trace_args\.endpont"):
        load(tmp_path, "  trace_exporter: zipkin\n  trace_args: {endpont: x}\n")


def test_span_links_are_kept_as_a_tag_and_long_values_whole() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("one") as one, tracer.start_as_current_span("two") as two:
        pass
    ids = [f"experience-{i:04d}" for i in range(50)]  # far past the stock 128-character cut
    links = [Link(one.get_span_context()), Link(two.get_span_context())]
    with tracer.start_as_current_span("step", links=links, attributes={"rft.ids": ids}):
        pass
    spans = memory.get_finished_spans()
    body = LinkTaggingEncoder(None).serialize(spans, NodeEndpoint())  # type: ignore[arg-type]
    encoded = {s["name"]: s for s in json.loads(body)}
    expected = [
        (
            format_trace_id(s.get_span_context().trace_id),
            format_span_id(s.get_span_context().span_id),
        )
        for s in (one, two)
    ]
    assert parse_link_references(encoded["step"]["tags"][LINKS_TAG]) == expected
    assert json.loads(encoded["step"]["tags"]["rft.ids"]) == ids
    assert LINKS_TAG not in encoded["one"].get("tags", {})


def test_zipkin_is_optional_in_the_stack(tmp_path: Path) -> None:
    stack = LocalStack(LocalStackSettings(root=tmp_path / "root"), cache_dir=tmp_path / "cache")
    assert stack.default_services() == ("kafka", "minio")
    # not running, an optional server is left out of the status (and of its health)
    assert [s.name for s in stack.status().services] == ["kafka", "minio"]
    assert stack.zipkin.endpoint == f"http://127.0.0.1:{stack.settings.zipkin_port}/zipkin/"
