"""Import of exported experiences (Parquet, JSONL, SQL) back into an experience topic.

An export written by `rft.consumers.replay.export` becomes Experience events again, equal field
by field to the ones exported, keyed by task id as explorers key them (a rollout group stays in
one partition). Readers stream: one batch of rows in memory at a time. Add a format with
`@IMPORT_FORMATS.register("name")` on a class of `ImportReader`'s shape.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from rft.config.connections import KafkaSettings
from rft.errors import ReplayError
from rft.events.models import Experience
from rft.events.topics import ensure_topics
from rft.events.transport import kafka_backend
from rft.events.writer import EventWriter
from rft.registry import Registry
from rft.replay.experience_rows import (
    from_arrow,
    from_sql_row,
    jsonl_experiences,
    sql_url,
)


class ImportReader(Protocol):
    suffixes: ClassVar[tuple[str, ...]]  # file endings this format is picked for by default

    def __init__(self, source: str, *, table: str) -> None: ...

    @property
    def where(self) -> str: ...

    @property
    def total_rows(self) -> int: ...

    def batches(self, rows: int) -> Iterator[list[Experience]]: ...

    def close(self) -> None: ...


IMPORT_FORMATS: Registry[type[ImportReader]] = Registry("import format")


def _existing_file(source: str) -> Path:
    path = Path(source).expanduser()
    if not path.is_file():
        raise ReplayError(f"{path}: no such file")
    return path


@IMPORT_FORMATS.register("parquet")
class ParquetImportReader:
    suffixes: ClassVar[tuple[str, ...]] = (".parquet", ".pq")

    def __init__(self, source: str, *, table: str) -> None:
        import pyarrow.parquet as pq

        self.path = _existing_file(source)
        try:
            self._file = pq.ParquetFile(str(self.path))
        except (OSError, ValueError) as exc:
            raise ReplayError(f"{self.path}: not a readable Parquet file: {exc}") from exc

    @property
    def where(self) -> str:
        return str(self.path)

    @property
    def total_rows(self) -> int:
        return int(self._file.metadata.num_rows)

    def batches(self, rows: int) -> Iterator[list[Experience]]:
        first = 0
        for batch in self._file.iter_batches(batch_size=rows):
            yield list(from_arrow(batch, self.where, first))
            first += batch.num_rows

    def close(self) -> None:
        self._file.close()


@IMPORT_FORMATS.register("jsonl")
class JsonlImportReader:
    suffixes: ClassVar[tuple[str, ...]] = (".jsonl", ".ndjson", ".json")

    def __init__(self, source: str, *, table: str) -> None:
        self.path = _existing_file(source)
        with self.path.open("rb") as fh:
            self._lines = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))

    @property
    def where(self) -> str:
        return str(self.path)

    @property
    def total_rows(self) -> int:
        return self._lines

    def batches(self, rows: int) -> Iterator[list[Experience]]:
        batch: list[Experience] = []
        for exp in jsonl_experiences(self.path):
            batch.append(exp)
            if len(batch) >= rows:
                yield batch
                batch = []
        if batch:
            yield batch

    def close(self) -> None:
        pass


@IMPORT_FORMATS.register("sql")
class SqlImportReader:
    suffixes: ClassVar[tuple[str, ...]] = (".db", ".sqlite", ".sqlite3")

    def __init__(self, source: str, *, table: str) -> None:
        from rft.storage.sql_database import SqlDatabase

        if "://" not in source:
            _existing_file(source)  # SQLite would create an empty database instead
        self._database = SqlDatabase(sql_url(source))
        try:
            if not self._database.has_table(table):
                raise ReplayError(f"no table {table!r} in {source} (give --table NAME)")
            self._table = self._database.table(table)
        except BaseException:
            self._database.close()
            raise
        self._where = f"table {table} in {self._database.where}"

    @property
    def where(self) -> str:
        return self._where

    @property
    def total_rows(self) -> int:
        return self._database.count(self._table)

    def batches(self, rows: int) -> Iterator[list[Experience]]:
        order = [
            c
            for c in ("source_topic", "source_partition", "source_offset")
            if c in self._table.columns
        ]
        for chunk in self._database.batches(self._table, order_by=order, rows=rows):
            yield [from_sql_row(row, self._row_where(row)) for row in chunk]

    def _row_where(self, row: Mapping[str, Any]) -> str:
        source = f"{row.get('source_topic')}[{row.get('source_partition')}]"
        return f"{self._where}, row of {source}@{row.get('source_offset')}"

    def close(self) -> None:
        self._database.close()


def prepare_target_topic(kafka: KafkaSettings, topic: str, *, append: bool) -> None:
    """Create `topic` if needed; refuse one that already holds records unless `append`, so a
    replay never mixes into a topic by accident."""
    ensure_topics(kafka, [topic])
    with kafka_backend(kafka).admin() as admin:
        held = sum(b.high - b.low for b in admin.partition_bounds([topic]))
    if held and not append:
        raise ReplayError(
            f"topic {topic} already holds {held} record(s); write to a new topic or pass --append"
        )


@dataclass
class ImportSummary:
    written: int = 0
    seconds: float = 0.0


class Progress(Protocol):
    def update(self, done: int) -> None: ...


def import_experiences(
    reader: ImportReader,
    writer: EventWriter,
    topic: str,
    *,
    progress: Progress | None = None,
    batch_rows: int = 2000,
) -> ImportSummary:
    """Write every experience `reader` holds to `topic` (keyed by task id) and flush."""
    summary = ImportSummary()
    started = time.monotonic()
    for batch in reader.batches(batch_rows):
        for exp in batch:
            writer.send(topic, exp, key=exp.task_id)
        summary.written += len(batch)
        if progress is not None:
            progress.update(summary.written)
    writer.flush()
    summary.seconds = time.monotonic() - started
    return summary
