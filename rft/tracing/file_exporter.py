"""`JsonLinesSpanExporter`: finished spans appended to a file, one JSON object a line.

The `file` trace exporter (`monitor.trace_exporter: file`, `monitor.trace_args.path`). Every
process of a run may append to the same file: each line goes out in one `write` on a descriptor
opened with O_APPEND, which Linux (and every POSIX system for regular local files) places at the
end as a whole, so lines of concurrent processes never interleave. A line holds what a reader
needs to rebuild the trace: ids in W3C hex, the parent, the links with their attributes, times in
Unix nanoseconds, the attributes, the status and the process's `service.name`.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext, format_span_id, format_trace_id

from rft.errors import ConfigError


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """The JSON-ready record of one finished span."""
    context = span.get_span_context()
    assert context is not None  # a finished SDK span always has one
    parent = span.parent
    resource = span.resource.attributes if span.resource is not None else {}
    return {
        "name": span.name,
        "service": resource.get("service.name"),
        "kind": span.kind.name,
        "trace_id": format_trace_id(context.trace_id),
        "span_id": format_span_id(context.span_id),
        "parent_span_id": format_span_id(parent.span_id) if parent is not None else None,
        "parent_trace_id": format_trace_id(parent.trace_id) if parent is not None else None,
        "start_time_unix_nano": span.start_time,
        "end_time_unix_nano": span.end_time,
        "attributes": _plain(span.attributes),
        "links": [
            {**_ids(link.context), "attributes": _plain(link.attributes)} for link in span.links
        ],
        "status": span.status.status_code.name,
        "status_message": span.status.description,
    }


def _ids(context: SpanContext) -> dict[str, str]:
    return {
        "trace_id": format_trace_id(context.trace_id),
        "span_id": format_span_id(context.span_id),
    }


def _plain(attributes: Any) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in (attributes or {}).items()}


class JsonLinesSpanExporter(SpanExporter):
    """Appends each exported span as a JSON line to `path` (its directory is created)."""

    synchronous = True  # written as each span ends: a local append is cheap, and nothing is lost

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise ConfigError(
                f"monitor.trace_args.path: cannot open {self.path} for spans: {exc}"
            ) from exc
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            if self._fd is None:
                return SpanExportResult.FAILURE
            for span in spans:
                line = json.dumps(span_record(span), separators=(",", ":"), default=str) + "\n"
                os.write(self._fd, line.encode("utf-8"))
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every line is written when exported

    def shutdown(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def read_span_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a span file, in the order they were written (a torn last line skipped)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.endswith("\n"):
                yield json.loads(line)
