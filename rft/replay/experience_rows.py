"""Experiences as table rows: the columns an export writes and an import reads back.

One column per Experience field, in the event's field order, plus where the event was read
(`source_topic`, `source_partition`, `source_offset`, `source_timestamp_ms`) and, when asked for,
the text decoded from the token ids (`prompt_decoded`, `response_decoded`). Token ids, logprobs,
the action mask and token rewards are lists (Arrow list columns in Parquet, JSON arrays in JSONL
and in SQL text columns); `info` and `metrics` are maps (JSON objects in JSONL and SQL);
`created_at` is milliseconds since the epoch. Every conversion here is exact: an experience read
back from any of the three shapes equals the original field by field.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rft.errors import ReplayError
from rft.events.models import FLOAT_DTYPE, ID_DTYPE, MASK_DTYPE, Experience

SOURCE_COLUMNS = ("source_topic", "source_partition", "source_offset", "source_timestamp_ms")
DECODED_COLUMNS = ("prompt_decoded", "response_decoded")

# The kind of every Experience field; a test fails when the event gains a field missing here.
FIELD_KINDS: dict[str, str] = {
    "experience_id": "str",
    "task_id": "str",
    "group_id": "str",
    "group_size": "int32",
    "explorer_id": "str",
    "model_version": "int64",
    "prompt_ids": "ids",
    "response_ids": "ids",
    "logprobs": "floats",
    "action_mask": "mask",
    "reward": "float64",
    "token_rewards": "optional_floats",
    "prompt_text": "str",
    "response_text": "str",
    "info": "str_map",
    "truncated": "bool",
    "metrics": "float_map",
    "logprob_temperature": "float64",
    "explorer_group": "str",
    "trajectory_id": "str",
    "turn": "int32",
    "turn_count": "int32",
    "created_at": "int64",
}
EXPERIENCE_COLUMNS = tuple(f.name for f in dataclasses.fields(Experience))

_ARROW_TYPES: dict[str, pa.DataType] = {
    "str": pa.string(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "ids": pa.list_(pa.int32()),
    "floats": pa.list_(pa.float32()),
    "optional_floats": pa.list_(pa.float32()),
    "mask": pa.list_(pa.bool_()),
    "str_map": pa.map_(pa.string(), pa.string()),
    "float_map": pa.map_(pa.string(), pa.float64()),
}
_SOURCE_TYPES = (pa.string(), pa.int32(), pa.int64(), pa.int64())
_ARRAY_DTYPES = {
    "ids": ID_DTYPE,
    "floats": FLOAT_DTYPE,
    "optional_floats": FLOAT_DTYPE,
    "mask": MASK_DTYPE,
}
_LIST_KINDS = frozenset(_ARRAY_DTYPES)
_MAP_KINDS = frozenset({"str_map", "float_map"})
_DEFAULTS = {
    f.name: f.default
    for f in dataclasses.fields(Experience)
    if f.default is not dataclasses.MISSING
}
_DEFAULTS |= {
    f.name: f.default_factory()
    for f in dataclasses.fields(Experience)
    if f.default_factory is not dataclasses.MISSING and f.name != "created_at"
}


@dataclass(frozen=True, slots=True)
class ExportRow:
    """One experience and where it was read; decoded text only when the export asks for it."""

    exp: Experience
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    prompt_decoded: str | None = None
    response_decoded: str | None = None

    @property
    def source(self) -> tuple[str, int, int, int]:
        return (self.topic, self.partition, self.offset, self.timestamp_ms)


def columns(decoded: bool) -> list[str]:
    """Column names, in order."""
    return [*SOURCE_COLUMNS, *EXPERIENCE_COLUMNS, *(DECODED_COLUMNS if decoded else ())]


def arrow_schema(decoded: bool) -> pa.Schema:
    fields = [
        pa.field(n, t, nullable=False) for n, t in zip(SOURCE_COLUMNS, _SOURCE_TYPES, strict=True)
    ]
    fields += [
        pa.field(n, _ARROW_TYPES[FIELD_KINDS[n]], nullable=FIELD_KINDS[n] == "optional_floats")
        for n in EXPERIENCE_COLUMNS
    ]
    if decoded:
        fields += [pa.field(n, pa.string()) for n in DECODED_COLUMNS]
    return pa.schema(fields)


def _list_array(arrays: Sequence[np.ndarray | None], kind: str) -> pa.Array:
    """One Arrow list column from numpy arrays without a Python list per token."""
    lengths = np.fromiter((0 if a is None else a.shape[0] for a in arrays), np.int64, len(arrays))
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    present = [a for a in arrays if a is not None]
    dtype = _ARRAY_DTYPES[kind]
    values = np.concatenate(present) if present else np.zeros(0, dtype=dtype)
    list_type = _ARROW_TYPES[kind]
    mask = None
    if kind == "optional_floats":
        mask = pa.array([a is None for a in arrays], pa.bool_())
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ReplayError(
            f"one export batch holds {offsets[-1]} list values: write smaller batches"
        )
    return pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)),
        pa.array(values, type=list_type.value_type),
        type=list_type,
        mask=mask,
    )


def to_arrow(rows: Sequence[ExportRow], schema: pa.Schema) -> pa.RecordBatch:
    """A record batch of `rows` in `schema` (from `arrow_schema`)."""
    arrays: list[pa.Array] = []
    sources = list(zip(*(r.source for r in rows), strict=True)) if rows else [(), (), (), ()]
    arrays += [pa.array(list(values), t) for values, t in zip(sources, _SOURCE_TYPES, strict=True)]
    for name in EXPERIENCE_COLUMNS:
        kind = FIELD_KINDS[name]
        values = [getattr(r.exp, name) for r in rows]
        if kind in _LIST_KINDS:
            arrays.append(_list_array(values, kind))
        elif kind in _MAP_KINDS:
            arrays.append(pa.array([list(v.items()) for v in values], _ARROW_TYPES[kind]))
        else:
            arrays.append(pa.array(values, _ARROW_TYPES[kind]))
    if len(schema) > len(arrays):
        arrays.append(pa.array([r.prompt_decoded for r in rows], pa.string()))
        arrays.append(pa.array([r.response_decoded for r in rows], pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _experience(values: Mapping[str, Any], where: Callable[[], str]) -> Experience:
    try:
        return Experience(**values)
    except (TypeError, ValueError) as exc:
        raise ReplayError(f"{where()}: not a valid experience: {exc}") from exc


def _required(available: Sequence[str], where: str) -> list[str]:
    missing = [n for n in EXPERIENCE_COLUMNS if n not in available and n not in _DEFAULTS]
    if missing:
        raise ReplayError(f"{where}: no column(s) {', '.join(missing)}")
    return [n for n in EXPERIENCE_COLUMNS if n in available]


def from_arrow(batch: pa.RecordBatch, where: str, first_row: int = 0) -> Iterator[Experience]:
    """The experiences of an exported record batch; `where` (a file) and `first_row` name a bad
    row in errors. Columns other than the experience's own are ignored."""
    names = _required(batch.schema.names, where)
    per_column: dict[str, Callable[[int], Any]] = {}
    for name in names:
        col = batch.column(name)
        kind = FIELD_KINDS[name]
        if kind in _LIST_KINDS:
            per_column[name] = _list_getter(col, kind)
        elif kind in _MAP_KINDS:
            per_column[name] = _map_getter(col.to_pylist())
        else:
            scalars = col.to_pylist()
            per_column[name] = scalars.__getitem__
    for i in range(batch.num_rows):
        values = {name: get(i) for name, get in per_column.items()}
        yield _experience(values, _row_name(where, first_row + i))


def _row_name(where: str, row: int) -> Callable[[], str]:
    return lambda: f"{where} row {row}"


def _map_getter(maps: list[list[tuple[str, Any]]]) -> Callable[[int], dict[str, Any]]:
    return lambda i: dict(maps[i])


def _list_getter(col: pa.Array, kind: str) -> Callable[[int], np.ndarray | None]:
    if not pa.types.is_list(col.type) and not pa.types.is_large_list(col.type):
        raise ReplayError(f"column of kind {kind} is {col.type}, not a list")
    offsets = col.offsets.to_numpy()
    values = np.asarray(col.values.to_numpy(zero_copy_only=False), dtype=_ARRAY_DTYPES[kind])
    valid = col.is_valid().to_numpy(zero_copy_only=False)

    def get(i: int) -> np.ndarray | None:
        if not valid[i]:
            return None
        return values[offsets[i] : offsets[i + 1]]

    return get


def to_json_object(row: ExportRow) -> dict[str, Any]:
    """The row as one JSON-able object: arrays as lists, maps as objects."""
    out: dict[str, Any] = dict(zip(SOURCE_COLUMNS, row.source, strict=True))
    exp = row.exp
    for name in EXPERIENCE_COLUMNS:
        value = getattr(exp, name)
        out[name] = value.tolist() if isinstance(value, np.ndarray) else value
    if row.prompt_decoded is not None or row.response_decoded is not None:
        out["prompt_decoded"] = row.prompt_decoded
        out["response_decoded"] = row.response_decoded
    return out


def from_json_object(obj: Mapping[str, Any], where: str) -> Experience:
    """An experience from a `to_json_object` object (or a SQL row whose lists and maps are
    already parsed); `where` names it in errors."""
    if not isinstance(obj, Mapping):
        raise ReplayError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    names = _required(list(obj), where)
    values: dict[str, Any] = {}
    for name in names:
        value = obj[name]
        kind = FIELD_KINDS[name]
        if kind in _LIST_KINDS and value is not None:
            if not isinstance(value, list):
                raise ReplayError(f"{where}: {name} is {type(value).__name__}, not a list")
            value = (
                np.asarray(value, dtype=_ARRAY_DTYPES[kind])
                if value
                else np.zeros(0, dtype=_ARRAY_DTYPES[kind])
            )
        values[name] = value
    return _experience(values, lambda: where)


# SQL keeps lists and maps as JSON text, so any SQLAlchemy database can hold an export.
SQL_JSON_KINDS = _LIST_KINDS | _MAP_KINDS


def to_sql_row(row: ExportRow) -> dict[str, Any]:
    obj = to_json_object(row)
    for name in EXPERIENCE_COLUMNS:
        if FIELD_KINDS[name] in SQL_JSON_KINDS and obj[name] is not None:
            obj[name] = json.dumps(obj[name], separators=(",", ":"))
    return obj


def from_sql_row(row: Mapping[str, Any], where: str) -> Experience:
    obj = dict(row)
    for name in EXPERIENCE_COLUMNS:
        if FIELD_KINDS.get(name) in SQL_JSON_KINDS and isinstance(obj.get(name), str):
            try:
                obj[name] = json.loads(obj[name])
            except ValueError as exc:
                raise ReplayError(f"{where}: column {name} is not JSON: {exc}") from exc
    return from_json_object(obj, where)


def sql_url(destination: str) -> str:
    """A SQLAlchemy URL as given, or a SQLite URL for a plain file path."""
    return destination if "://" in destination else f"sqlite:///{Path(destination).expanduser()}"


def jsonl_experiences(path: Path) -> Iterator[Experience]:
    """The experiences of a JSONL export, in file order (blank lines skipped); a bad line is a
    ReplayError naming `file:line`."""
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise ReplayError(f"{where}: not JSON: {exc}") from exc
            yield from_json_object(obj, where)
