"""The `zipkin` trace exporter's span encoding: Zipkin's JSON v2 with the span links kept.

Zipkin's span model has no links, and OpenTelemetry's Zipkin encoder drops them; yet a train step
is tied to the experiences it trained on only by links (and an explorer's load to the announce of
its version). So each span with links carries them in one tag, `rft.links`: a JSON list of
`"<trace id>/<span id>"`, which the Zipkin UI shows with the span's other tags and which names the
linked trace the way the UI's own address does (`/zipkin/traces/<trace id>`). Link attributes are
not kept. Tag values are kept whole (a train step's list of experience ids and links is long).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.zipkin.json import Protocol, ZipkinExporter
from opentelemetry.exporter.zipkin.json.v2 import JsonV2Encoder
from opentelemetry.trace import Link, format_span_id, format_trace_id

LINKS_TAG = "rft.links"


def link_reference(link: Link) -> str:
    return f"{format_trace_id(link.context.trace_id)}/{format_span_id(link.context.span_id)}"


def parse_link_references(tag: str) -> list[tuple[str, str]]:
    """(trace id, span id) of each link in an `rft.links` tag."""
    return [tuple(ref.split("/", 1)) for ref in json.loads(tag)]  # type: ignore[misc]


class LinkTaggingEncoder(JsonV2Encoder):
    def _encode_span(self, span: Any, encoded_local_endpoint: Any) -> dict[str, Any]:
        encoded: dict[str, Any] = super()._encode_span(span, encoded_local_endpoint)
        links: Sequence[Link] = span.links or ()
        if links:
            tags = encoded.setdefault("tags", {})
            tags[LINKS_TAG] = json.dumps([link_reference(link) for link in links])
        return encoded


def link_tagging_zipkin_exporter(endpoint: str, timeout: int | None = None) -> ZipkinExporter:
    exporter = ZipkinExporter(Protocol.V2, endpoint=endpoint, timeout=timeout)
    # None: no cut (the argument is typed int but the encoder reads None as "keep whole")
    exporter.encoder = LinkTaggingEncoder(max_tag_value_length=None)  # type: ignore[arg-type,assignment]
    return exporter
