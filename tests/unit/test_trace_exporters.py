"""Span exporters (`monitor.trace_exporter`, `monitor.trace_args`): the JSON-lines `file` exporter
that several processes share, `console`, the load-time checks of names, settings and optional
packages, and the default that sends nothing anywhere."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Link, SpanKind

from rft.catalog import load_config
from rft.errors import ConfigError
from rft.tracing.file_exporter import read_span_records, span_record
from rft.tracing.propagation import extract_trace_context, inject_trace_headers
from rft.tracing.setup import check_exporter, configure_tracing, trace_options
from tests.unit.config_samples import MINIMAL

ROOT = Path(__file__).resolve().parents[2]


def load(tmp_path: Path, monitor: str = "") -> object:
    path = tmp_path / "run.yaml"
    text = MINIMAL + f"checkpoint_root_dir: {tmp_path}/ck\n"
    if monitor:
        text += f"monitor:\n{monitor}"
    path.write_text(text)
    return load_config(path)


def test_file_exporter_writes_one_json_line_per_span_with_parent_and_links(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "spans.jsonl"
    provider = configure_tracing(
        "rft-test", "file", options={"path": str(path)}, install_global=False, batch=False
    )
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("other") as other:
        pass
    with (
        tracer.start_as_current_span("parent") as parent,
        tracer.start_as_current_span(
            "child",
            kind=SpanKind.CONSUMER,
            links=[Link(other.get_span_context(), {"why": "test"})],
            attributes={"rft.task_id": "t:0:1", "rft.sizes": [1, 2]},
        ),
    ):
        pass
    provider.shutdown()
    records = {r["name"]: r for r in read_span_records(path)}
    assert set(records) == {"other", "parent", "child"}
    child, parent_record = records["child"], records["parent"]
    assert (
        child["trace_id"]
        == parent_record["trace_id"]
        == f"{parent.get_span_context().trace_id:032x}"
    )
    assert child["parent_span_id"] == parent_record["span_id"]
    assert parent_record["parent_span_id"] is None
    assert child["links"] == [
        {
            "trace_id": f"{other.get_span_context().trace_id:032x}",
            "span_id": f"{other.get_span_context().span_id:016x}",
            "attributes": {"why": "test"},
        }
    ]
    assert child["attributes"] == {"rft.task_id": "t:0:1", "rft.sizes": [1, 2]}
    assert child["kind"] == "CONSUMER" and child["service"] == "rft-test"
    assert parent_record["start_time_unix_nano"] <= child["start_time_unix_nano"]
    assert child["end_time_unix_nano"] <= parent_record["end_time_unix_nano"]


WRITER = """
import sys
from rft.tracing.setup import configure_tracing
provider = configure_tracing(sys.argv[2], "file", options={"path": sys.argv[1]}, install_global=False)
tracer = provider.get_tracer("t")
for i in range(int(sys.argv[3])):
    with tracer.start_as_current_span("s", attributes={"i": i, "pad": "x" * (i % 7) * 500}):
        pass
provider.shutdown()
"""


def test_processes_appending_to_one_file_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    n = 400
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), f"p{k}", str(n)],
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        for k in range(3)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    lines = path.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # each line whole
    assert len(records) == 3 * n
    for k in range(3):
        mine = sorted(r["attributes"]["i"] for r in records if r["service"] == f"p{k}")
        assert mine == list(range(n))


def test_console_exporter_prints_spans(capsys: pytest.CaptureFixture[str]) -> None:
    provider = configure_tracing("rft-x", "console", install_global=False, batch=False)
    with provider.get_tracer("t").start_as_current_span("visible-span"):
        pass
    provider.shutdown()
    out = capsys.readouterr().out
    assert '"name": "visible-span"' in out


def test_the_default_exports_nothing_but_still_makes_contexts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RFT_TRACE_EXPORTER", raising=False)
    cfg = load(tmp_path)
    assert cfg.monitor.trace_exporter == "none" and cfg.monitor.trace_content is False
    provider = configure_tracing("x", cfg.monitor.trace_exporter, install_global=False)
    assert provider._active_span_processor._span_processors == ()  # nowhere to send
    with provider.get_tracer("t").start_as_current_span("s") as span:
        assert not span.is_recording()  # no cost beyond ids
        assert span.get_span_context().is_valid  # so Kafka headers still carry the context
        headers = inject_trace_headers([])
    assert [k for k, _ in headers] == ["traceparent"]
    monkeypatch.setenv("RFT_TRACE_EXPORTER", "console")
    assert load(tmp_path).monitor.trace_exporter == "console"


def test_file_path_defaults_into_the_job_dir_and_trace_args_reach_the_exporter(
    tmp_path: Path,
) -> None:
    cfg = load(tmp_path, "  trace_exporter: file\n")
    assert trace_options(cfg) == {"path": str(cfg.job_dir / "traces.jsonl")}
    chosen = tmp_path / "mine.jsonl"
    cfg = load(tmp_path, f"  trace_exporter: file\n  trace_args: {{path: {chosen}}}\n")
    provider = configure_tracing(
        "x", cfg.monitor.trace_exporter, options=trace_options(cfg), install_global=False
    )
    with provider.get_tracer("t").start_as_current_span("s"):
        pass
    provider.shutdown()
    assert [r["name"] for r in read_span_records(chosen)] == ["s"]


@pytest.mark.parametrize(
    ("monitor", "message"),
    [
        ("  trace_exporter: jaegerish\n", r"monitor\.trace_exporter"),
        ("  trace_exporter: file\n  trace_args: {paht: x}\n", r"monitor\.trace_args\.paht"),
        ("  trace_exporter: otlp\n  trace_args: {protocol: carrier-pigeon}\n", "protocol"),
    ],
)
def test_bad_exporter_settings_are_refused_at_load(
    tmp_path: Path, monitor: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, monitor)


@pytest.mark.parametrize(
    ("protocol", "module", "package"),
    [
        ("http/protobuf", "opentelemetry.exporter.otlp.proto.http", "proto-http"),
        ("grpc", "opentelemetry.exporter.otlp.proto.grpc", "proto-grpc"),
    ],
)
def test_otlp_is_refused_at_load_exactly_when_its_package_is_missing(
    protocol: str, module: str, package: str
) -> None:
    try:
        installed = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        installed = False
    problems = check_exporter("otlp", {"protocol": protocol})
    if installed:
        assert problems == []
    else:
        ((key, why),) = problems
        assert key == "monitor.trace_exporter"
        assert f"pip install opentelemetry-exporter-otlp-{package}" in why
        with pytest.raises(ConfigError, match=f"opentelemetry-exporter-otlp-{package}"):
            configure_tracing("x", "otlp", options={"protocol": protocol}, install_global=False)


def test_an_exporting_process_records_spans_below_an_unsampled_parent(tmp_path: Path) -> None:
    """A publisher exporting nowhere marks its contexts unsampled; an explorer that exports
    still records its spans, in the publisher's trace."""
    silent = configure_tracing("rft-publisher", "none", install_global=False)
    with silent.get_tracer("t").start_as_current_span("task.publish"):
        headers = inject_trace_headers([])
    path = tmp_path / "spans.jsonl"
    loud = configure_tracing(
        "rft-explorer", "file", options={"path": str(path)}, install_global=False, batch=False
    )
    with loud.get_tracer("t").start_as_current_span(
        "explorer.rollout", context=extract_trace_context(headers)
    ) as span:
        assert span.is_recording()
    loud.shutdown()
    (record,) = read_span_records(path)
    assert record["trace_id"] == headers[0][1].decode().split("-")[1]
    assert record["parent_span_id"] == headers[0][1].decode().split("-")[2]


_scalars = st.one_of(
    st.text(max_size=20),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
)
_values = st.one_of(
    _scalars,
    st.lists(st.text(max_size=5), max_size=4),
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=4),
    st.lists(st.floats(allow_nan=False), max_size=4),
)


@settings(max_examples=60, deadline=None)
@given(attributes=st.dictionaries(st.text(min_size=1, max_size=12), _values, max_size=6))
def test_span_attributes_round_trip_through_a_json_line(attributes: dict) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_ON)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("s", attributes=attributes):
        pass
    (span,) = exporter.get_finished_spans()
    record = json.loads(json.dumps(span_record(span)))
    assert record["attributes"] == {
        k: list(v) if isinstance(v, list) else v for k, v in attributes.items()
    }


RUNS_IN_TURN = """
import sys
from opentelemetry import trace
from rft.tracing.setup import configure_tracing
tracer = trace.get_tracer("a.module")  # taken at import, as every module's is
for run, path in (("p.stage-a", sys.argv[1]), ("p.stage-b", sys.argv[2])):
    configure_tracing("rft-" + run, "file", options={"path": path}, run=run)
    with tracer.start_as_current_span("publish"):
        pass
"""


def test_runs_in_turn_in_one_process_each_label_their_own_spans(tmp_path: Path) -> None:
    """`rft run` of stages runs each stage in the same process: a tracer taken before the first
    run's provider was installed writes each run's spans to that run's exporter, labelled with
    that run (the first run's label on the second's spans was the bug)."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", RUNS_IN_TURN, str(first), str(second)],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for path, run in ((first, "p.stage-a"), (second, "p.stage-b")):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert [(r["name"], r["service"]) for r in records] == [("publish", f"rft-{run}")]
