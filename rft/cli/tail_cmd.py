"""`rft tail TOPIC...`: print a topic's events, one line each, with topic[partition]@offset.

Reads as a throwaway consumer group (or --group G) and never commits. Token arrays and raw bytes
are summarised. Stops after --max events, or after --timeout seconds without a new one (exit 0).
A broker that cannot be reached for --unreachable-timeout seconds ends it with exit status 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import uuid
from typing import Any

from rft.cli.topics_cmd import add_kafka_arguments, kafka_settings_from, resolve_topics

_PREVIEW = 4  # array items / bytes shown before the summary


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tail",
        help="print the events of topics",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("topics", nargs="+", metavar="TOPIC", help="topic (or short name)")
    parser.add_argument("--from-beginning", action="store_true", help="start at the oldest event")
    parser.add_argument("--group", help="consumer group (default: a fresh one; never committed)")
    parser.add_argument("--max", type=int, help="stop after this many events")
    parser.add_argument(
        "--timeout", type=float, help="stop after this many seconds without a new event"
    )
    parser.add_argument(
        "--unreachable-timeout",
        type=float,
        default=10.0,
        help="fail when no broker answers for this many seconds (default 10)",
    )
    add_kafka_arguments(parser)
    parser.set_defaults(func=run)


def summarise(value: Any) -> Any:
    """A JSON-able, short rendering of an event field."""
    import numpy as np

    if isinstance(value, np.ndarray):
        items = ", ".join(str(v) for v in value[:_PREVIEW].tolist())
        more = ", ..." if value.shape[0] > _PREVIEW else ""
        return f"{value.dtype}[{value.shape[0]}] [{items}{more}]"
    if isinstance(value, bytes | bytearray):
        more = "..." if len(value) > _PREVIEW * 4 else ""
        return f"bytes[{len(value)}] {bytes(value[: _PREVIEW * 4]).hex()}{more}"
    if isinstance(value, dict):
        return {str(k): summarise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [summarise(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: summarise(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def format_line(record: Any, event: Any | None, error: Exception | None) -> str:
    where = f"{record.topic}[{record.partition}]@{record.offset}"
    key = record.key.decode("utf-8", "replace") if record.key is not None else "-"
    if error is not None:
        raw = summarise(record.value or b"")
        return f"{where} key={key} UNDECODABLE {type(error).__name__}: {error} ({raw})"
    body = json.dumps(summarise(event), ensure_ascii=False, default=str)
    return f"{where} key={key} {type(event).__name__} {body}"


def run(args: argparse.Namespace) -> int:
    from rft.errors import DecodeError
    from rft.events.codec import EventCodec
    from rft.events.transport import kafka_backend

    settings = kafka_settings_from(args)
    topics = resolve_topics(args, args.topics)
    group = args.group or f"rft-tail-{uuid.uuid4().hex[:12]}"
    codec = EventCodec.default()
    shown = 0
    last_event = time.monotonic()
    consumer = kafka_backend(settings).consumer(
        group,
        topics,
        from_beginning=args.from_beginning,
        unreachable_timeout_s=args.unreachable_timeout,
    )
    with consumer:
        while args.max is None or shown < args.max:
            wanted = 500 if args.max is None else min(500, args.max - shown)
            records = consumer.poll(wanted, 0.5)
            if not records:
                if args.timeout is not None and time.monotonic() - last_event >= args.timeout:
                    break
                continue
            last_event = time.monotonic()
            for record in records:
                try:
                    line = format_line(record, codec.decode(record.value or b""), None)
                except DecodeError as exc:
                    line = format_line(record, None, exc)
                print(line, flush=True)
                shown += 1
    print(f"rft tail: {shown} event(s) from {', '.join(topics)}", file=sys.stderr)
    return 0
