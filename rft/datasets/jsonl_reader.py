"""Reads a JSONL taskset: one JSON object per line, each tagged `path:line` (1-based).

Blank lines are skipped (they hold no row). Lines that are not UTF-8, not JSON, not an object, or
that use NaN/Infinity become BadRows; reading never stops at the first bad line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rft.datasets.rows import BadRow, TasksetRow
from rft.errors import TasksetError


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def read_jsonl(path: Path, start_index: int = 0) -> Iterator[TasksetRow | BadRow]:
    """Every non-blank line of `path` as a TasksetRow or BadRow, in file order; taskset indices
    start at `start_index` (a shard of a split continues the count of the shards before it)."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise TasksetError(f"{path}: cannot open taskset file: {exc.strerror or exc}") from exc
    index = start_index
    with handle:
        for line_number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            origin = f"{path}:{line_number}"
            yield _parse_line(raw, index, origin)
            index += 1


def _parse_line(raw: bytes, index: int, origin: str) -> TasksetRow | BadRow:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return BadRow(index, origin, f"not UTF-8 (byte {exc.start})")
    try:
        value = json.loads(text.rstrip("\r\n"), parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        return BadRow(index, origin, f"bad JSON at column {exc.colno}: {exc.msg}")
    except ValueError as exc:  # NaN / Infinity, refused by _reject_constant
        return BadRow(index, origin, f"bad JSON: {exc}")
    if not isinstance(value, dict):
        return BadRow(index, origin, f"expected a JSON object, got {type(value).__name__}")
    return TasksetRow(index, value, origin)
