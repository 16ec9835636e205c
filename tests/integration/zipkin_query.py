"""Reading a run's spans back from a Zipkin server's query API (`/api/v2/traces`,
`/api/v2/trace/{id}`), as the records `rft.tracing.file_exporter` writes, so one set of checks
reads either store.

Zipkin keeps every attribute as a string tag: numbers come back as numbers (except `*_id` keys,
which stay strings), lists as JSON lists of strings, and the links from the `rft.links` tag.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from typing import Any

from rft.tracing.setup import RUN_ATTRIBUTE
from rft.tracing.zipkin_exporter import LINKS_TAG, parse_link_references

_INT = re.compile(r"-?\d+")
_FLOAT = re.compile(r"-?\d+\.\d*(e-?\d+)?")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.load(resp)


def tag_value(key: str, value: str) -> Any:
    if value.startswith("["):
        return json.loads(value)
    if key.endswith("_id"):
        return value
    if _INT.fullmatch(value):
        return int(value)
    if _FLOAT.fullmatch(value):
        return float(value)
    return {"true": True, "false": False}.get(value, value)


def span_record(span: dict[str, Any]) -> dict[str, Any]:
    tags = dict(span.get("tags", {}))
    links = tags.pop(LINKS_TAG, None)
    return {
        "name": span["name"],
        "service": span.get("localEndpoint", {}).get("serviceName"),
        "trace_id": span["traceId"],
        "span_id": span["id"],
        "parent_span_id": span.get("parentId"),
        "attributes": {k: tag_value(k, v) for k, v in tags.items()},
        "links": [
            {"trace_id": t, "span_id": s}
            for t, s in (parse_link_references(links) if links else [])
        ],
        "status": tags.get("otel.status_code", "UNSET"),
    }


def run_traces(base: str, run: str, **query: str) -> list[list[dict[str, Any]]]:
    """Every trace of run `run` (`<project>.<name>`) in the last day: a tag search on `rft.run`,
    narrowed by more query parameters (`spanName`, `serviceName`)."""
    params = {
        "annotationQuery": f"{RUN_ATTRIBUTE}={run}",
        "limit": "10000",
        "lookback": str(24 * 3600 * 1000),
        **query,
    }
    url = f"{base}/api/v2/traces?{urllib.parse.urlencode(params)}"
    return [[span_record(s) for s in trace] for trace in get_json(url)]


def trace_records(base: str, trace_id: str) -> list[dict[str, Any]]:
    """One trace, by id."""
    return [span_record(s) for s in get_json(f"{base}/api/v2/trace/{trace_id}")]
