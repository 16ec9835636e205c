"""Export of logged experiences to Parquet, JSONL or a SQL table, streaming.

`export_experiences` reads a `RangeReader` batch by batch, keeps what an `ExperienceFilter`
accepts, and hands rows to a writer from `EXPORT_FORMATS` in batches of `batch_rows`: memory holds
one batch, whatever the topic's size. Writers:

- `parquet`: one row group per batch (`pyarrow.parquet.ParquetWriter`);
- `jsonl`: one JSON object per line;
- `sql`: a table through SQLAlchemy (any URL; a plain path means a SQLite file), lists and maps
  as JSON text, one transaction per batch.

File writers write `<path>.partial` and rename it when the export completes, so an interrupted
export leaves no file that looks whole. Add a format with `@EXPORT_FORMATS.register("name")` on a
class of `ExportWriter`'s shape.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from rft.consumers.replay.filter import ExperienceFilter
from rft.consumers.replay.topic_range import RangeReader
from rft.errors import ConfigError, ReplayError, RftError, StorageError
from rft.events.models import Experience
from rft.registry import Registry
from rft.replay.experience_rows import (
    EXPERIENCE_COLUMNS,
    FIELD_KINDS,
    SOURCE_COLUMNS,
    SQL_JSON_KINDS,
    ExportRow,
    arrow_schema,
    sql_url,
    to_arrow,
    to_json_object,
    to_sql_row,
)

if TYPE_CHECKING:  # the database module (and SQLAlchemy) load only for a SQL export
    from rft.storage.sql_database import Column, ColumnKind

# token id arrays -> their text, one string per array (a tokenizer's batch_decode)
TextDecoder = Callable[[Sequence[np.ndarray]], list[str]]


class ExportWriter(Protocol):
    """Writes batches of rows to one destination; `close()` completes it, `abort()` drops it."""

    suffixes: ClassVar[tuple[str, ...]]  # file endings this format is picked for by default

    def __init__(self, destination: str, *, decoded: bool, overwrite: bool, table: str) -> None: ...

    @property
    def where(self) -> str: ...

    def write(self, rows: Sequence[ExportRow]) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


EXPORT_FORMATS: Registry[type[ExportWriter]] = Registry("export format")


def format_for(destination: str, formats: Registry[Any]) -> str:
    """The format a destination selects: a URL (`scheme://...`) means `sql`; otherwise the
    format whose `suffixes` end the name. ConfigError when none does."""
    if "://" in destination and "sql" in formats:
        return "sql"
    lowered = destination.lower()
    for name in formats:
        if lowered.endswith(formats.get(name).suffixes):
            return name
    known = ", ".join(f"{n} ({' '.join(formats.get(n).suffixes)})" for n in formats)
    raise ConfigError(
        f"cannot tell the format of {destination!r}: give --format ({known}, or a "
        "SQLAlchemy URL for sql)"
    )


class _FileTarget:
    """A file written as `<path>.partial` and renamed into place on completion."""

    def __init__(self, destination: str, overwrite: bool) -> None:
        self.path = Path(destination).expanduser()
        if self.path.exists() and not overwrite:
            raise ReplayError(f"{self.path} exists; pass --overwrite to replace it")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.partial = self.path.with_name(self.path.name + ".partial")

    def complete(self) -> None:
        os.replace(self.partial, self.path)

    def drop(self) -> None:
        self.partial.unlink(missing_ok=True)


@EXPORT_FORMATS.register("parquet")
class ParquetExportWriter:
    suffixes: ClassVar[tuple[str, ...]] = (".parquet", ".pq")

    def __init__(self, destination: str, *, decoded: bool, overwrite: bool, table: str) -> None:
        import pyarrow.parquet as pq

        self._target = _FileTarget(destination, overwrite)
        self._schema = arrow_schema(decoded)
        self._writer = pq.ParquetWriter(str(self._target.partial), self._schema)

    @property
    def where(self) -> str:
        return str(self._target.path)

    def write(self, rows: Sequence[ExportRow]) -> None:
        self._writer.write_batch(to_arrow(rows, self._schema))

    def close(self) -> None:
        self._writer.close()
        self._target.complete()

    def abort(self) -> None:
        self._writer.close()
        self._target.drop()


@EXPORT_FORMATS.register("jsonl")
class JsonlExportWriter:
    suffixes: ClassVar[tuple[str, ...]] = (".jsonl", ".ndjson", ".json")

    def __init__(self, destination: str, *, decoded: bool, overwrite: bool, table: str) -> None:
        self._target = _FileTarget(destination, overwrite)
        self._fh = self._target.partial.open("w", encoding="utf-8")

    @property
    def where(self) -> str:
        return str(self._target.path)

    def write(self, rows: Sequence[ExportRow]) -> None:
        dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
        self._fh.write("".join(dumps(to_json_object(r)) + "\n" for r in rows))

    def close(self) -> None:
        self._fh.close()
        self._target.complete()

    def abort(self) -> None:
        self._fh.close()
        self._target.drop()


def experience_columns(decoded: bool) -> list[Column]:
    """The SQL columns of an export: the row columns, keyed by where each event was read."""
    from rft.storage.sql_database import Column

    kinds: dict[str, ColumnKind] = {
        "str": "text",
        "int32": "int32",
        "int64": "int64",
        "float64": "float64",
        "bool": "bool",
    }
    cols = [
        Column("source_topic", "string", 255, primary_key=True),
        Column("source_partition", "int32", primary_key=True),
        Column("source_offset", "int64", primary_key=True),
        Column("source_timestamp_ms", "int64", nullable=False),
    ]
    for name in EXPERIENCE_COLUMNS:
        kind = FIELD_KINDS[name]
        sql_kind = "text" if kind in SQL_JSON_KINDS else kinds[kind]
        cols.append(Column(name, sql_kind, nullable=kind == "optional_floats"))
    if decoded:
        cols += [Column("prompt_decoded", "text"), Column("response_decoded", "text")]
    assert [c.name for c in cols[: len(SOURCE_COLUMNS)]] == list(SOURCE_COLUMNS)
    return cols


@EXPORT_FORMATS.register("sql")
class SqlExportWriter:
    suffixes: ClassVar[tuple[str, ...]] = (".db", ".sqlite", ".sqlite3")

    def __init__(self, destination: str, *, decoded: bool, overwrite: bool, table: str) -> None:
        from rft.storage.sql_database import SqlDatabase

        self._database = SqlDatabase(sql_url(destination))
        self._table_name = table
        try:
            if self._database.has_table(table):
                if not overwrite:
                    raise ReplayError(
                        f"{self.where} exists; pass --overwrite to replace it (or --table NAME)"
                    )
                self._database.drop_table(table)
            self._table = self._database.create_table(table, experience_columns(decoded))
        except BaseException:
            self._database.close()
            raise

    @property
    def where(self) -> str:
        return f"table {self._table_name} in {self._database.where}"

    def write(self, rows: Sequence[ExportRow]) -> None:
        try:
            self._database.insert(self._table, [to_sql_row(r) for r in rows])
        except StorageError as exc:  # the database's SqlError
            first = rows[0].source[:3] if rows else ()
            raise ReplayError(
                f"{self.where}: insert of {len(rows)} row(s) from {first} failed: {exc}"
            ) from exc

    def close(self) -> None:
        self._database.close()

    def abort(self) -> None:
        self._database.close()  # batches already committed stay: the error says how many


@dataclass
class ExportSummary:
    events: int = 0  # events read in the range
    written: int = 0  # experiences the filter kept
    other_events: int = 0  # events in the range that are not experiences
    undecodable: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


class Progress(Protocol):
    def update(self, done: int) -> None: ...


def export_experiences(
    reader: RangeReader,
    writer: ExportWriter,
    keep: ExperienceFilter | None = None,
    *,
    decode: TextDecoder | None = None,
    progress: Progress | None = None,
    batch_rows: int = 2000,
) -> ExportSummary:
    """Write the experiences of `reader`'s range that `keep` accepts; the writer is completed on
    success and aborted on any error."""
    keep = keep or ExperienceFilter()
    summary = ExportSummary()
    started = time.monotonic()
    pending: list[ExportRow] = []

    def flush() -> None:
        if decode is not None:
            prompts = decode([r.exp.prompt_ids for r in pending])
            responses = decode([r.exp.response_ids for r in pending])
            pending[:] = [
                ExportRow(r.exp, *r.source, prompt_decoded=p, response_decoded=q)
                for r, p, q in zip(pending, prompts, responses, strict=True)
            ]
        writer.write(pending)
        summary.written += len(pending)
        pending.clear()

    try:
        for batch in reader.batches():
            summary.events += len(batch)
            for env in batch:
                exp = env.event
                if not isinstance(exp, Experience):
                    summary.other_events += 1
                    continue
                if keep.accepts(exp):
                    pending.append(
                        ExportRow(exp, env.topic, env.partition, env.offset, env.timestamp_ms)
                    )
            if len(pending) >= batch_rows:
                flush()
            if progress is not None:
                progress.update(reader.done)
        if pending:
            flush()
    except (RftError, OSError) as exc:
        writer.abort()
        if isinstance(exc, ReplayError):
            raise
        raise ReplayError(
            f"export to {writer.where} stopped after {summary.written} experience(s): {exc}"
        ) from exc
    except BaseException:
        writer.abort()
        raise
    writer.close()
    summary.undecodable = len(reader.undecodable)
    summary.seconds = time.monotonic() - started
    return summary
