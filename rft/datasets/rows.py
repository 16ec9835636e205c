"""What taskset readers yield: good rows with their origin, and bad rows with the reason.

Every row remembers where it came from (`file:line` for JSONL, `file:row=N` for Arrow/Parquet) so
errors can name the place. `json_payload` turns a row into the strict-JSON dict a Task carries.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TasksetRow:
    """One usable row: its position in the taskset, its raw content and where it came from."""

    index: int
    payload: dict[str, Any]
    origin: str


@dataclass(frozen=True)
class BadRow:
    """A row that cannot become a task: where it is and why."""

    index: int
    origin: str
    reason: str

    def __str__(self) -> str:
        return f"{self.origin}: {self.reason}"


class NotJsonError(ValueError):
    """A value has no strict-JSON form (bytes, NaN, infinity, unknown objects)."""


def json_payload(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with dates as ISO text and decimals as strings; NotJsonError names the column."""
    return {str(key): _json_value(value, str(key)) for key, value in row.items()}


def _json_value(value: Any, where: str) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJsonError(f"column {where!r} holds {value!r}, which JSON cannot carry")
        return value
    if isinstance(value, dt.date | dt.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json_value(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise NotJsonError(f"column {where!r} holds a {type(value).__name__}, which JSON cannot carry")


def payload_json_text(payload: dict[str, Any]) -> str:
    """The strict JSON text of a payload (the form Task events carry)."""
    return json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
