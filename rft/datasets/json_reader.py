"""Reads a `.json` taskset file: a JSON array of objects, or JSON Lines under a `.json` name.

Hugging Face dataset repos hold `.json` split files in both forms. Rows are tagged `path:line`
(1-based; for an array, the line where the element starts), like JSONL rows. An element that is
not an object, or that holds NaN/Infinity, becomes a BadRow. A syntax error inside an array ends
the read with a TasksetError naming line and column: the elements after it cannot be told apart.
A file holding one JSON object spread over several lines is refused, since it is not rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from rft.datasets.jsonl_reader import read_jsonl
from rft.datasets.rows import BadRow, NotJsonError, TasksetRow, json_payload
from rft.errors import TasksetError

_SPACE = " \t\r\n"  # the whitespace JSON allows between tokens


def read_json(path: Path, start_index: int = 0) -> Iterator[TasksetRow | BadRow]:
    """Rows of the `.json` file `path`; taskset indices start at `start_index`."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TasksetError(f"{path}: cannot open taskset file: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TasksetError(f"{path}: not UTF-8 (byte {exc.start})") from exc
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as exc:
        if text.lstrip().startswith("["):
            raise TasksetError(
                f"{path}:{exc.lineno}:{exc.colno}: bad JSON in the array: {exc.msg}"
            ) from exc
        # not one JSON value: JSON Lines, where each line is judged on its own
        yield from read_jsonl(path, start_index)
        return
    if isinstance(whole, list):
        yield from _array_rows(path, text, start_index)
        return
    lines = sum(1 for line in text.splitlines() if line.strip())
    if isinstance(whole, dict) and lines <= 1:
        yield from read_jsonl(path, start_index)
        return
    shape = f"keys {sorted(whole)[:8]}" if isinstance(whole, dict) else type(whole).__name__
    raise TasksetError(
        f"{path}: holds a single JSON value ({shape}) over {lines} lines, not rows: expected "
        "JSON Lines (one object per line) or a JSON array of objects"
    )


def _array_rows(path: Path, text: str, start_index: int) -> Iterator[TasksetRow | BadRow]:
    """Elements of a JSON array already known to parse, each tagged with its starting line."""
    decoder = json.JSONDecoder()
    pos = _skip_space(text, text.index("[") + 1)
    line, counted_to = 1, 0
    index = start_index
    while text[pos] != "]":
        line += text.count("\n", counted_to, pos)
        counted_to = pos
        value, end = decoder.raw_decode(text, pos)
        origin = f"{path}:{line}"
        if not isinstance(value, dict):
            yield BadRow(index, origin, f"expected a JSON object, got {type(value).__name__}")
        else:
            try:
                yield TasksetRow(index, json_payload(value), origin)
            except NotJsonError as exc:
                yield BadRow(index, origin, str(exc))
        index += 1
        pos = _skip_space(text, end)
        if text[pos] == ",":
            pos = _skip_space(text, pos + 1)


def _skip_space(text: str, pos: int) -> int:
    while text[pos] in _SPACE:
        pos += 1
    return pos
