"""ExperienceMirror: copies the experiences a trainer reads into a SQL table of Trinity-RFT's shape.

In rft the experience buffer is always the run's Kafka topic. A Trinity-RFT config that says
`buffer.trainer_input.experience_buffer.storage_type: sql` asks for a SQL table instead; rft then
keeps the topic and has the trainer also insert every experience it reads (those the staleness
policy drops included) into the database at the buffer's `path` (a SQLAlchemy URL), in a table
named after the buffer's `name`, so SQL tooling written against Trinity-RFT keeps working.

The table has Trinity-RFT's experience columns: `id` (autoincrement key), `prompt`, `response`,
`message_list` (JSON, NULL: rft experiences carry token ids and text, not messages), `reward`,
`model_version`, `experience_bytes` and `consumed` (0: Trinity's readers count their reads there;
rft's trainer reads the topic). Two differences: `experience_bytes` holds the rft Experience event
in rft's Avro single-object encoding (decode it with `rft.events.codec.EventCodec`), not a pickled
Trinity object, and one more column, `experience_id`, unique, makes inserts idempotent: a trainer
that resumes from a checkpoint and reads experiences again adds no second row for them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rft.config import RftConfig
from rft.errors import ConfigError, StorageError
from rft.events.codec import EventCodec
from rft.events.models import Experience

if TYPE_CHECKING:  # the database module (and SQLAlchemy) load only when a mirror is configured
    from rft.storage.sql_database import Column, SqlDatabase, SqlTable

log = logging.getLogger(__name__)

#: Rows per INSERT (and per id lookup): well under SQLite's limit on bound parameters.
BATCH_ROWS = 500

TokenDecoder = Callable[[Sequence[int]], str]


@dataclass(frozen=True)
class MirrorTarget:
    """Where the mirror writes: a SQLAlchemy URL and a table name."""

    url: str
    table: str


def mirror_target(cfg: RftConfig) -> MirrorTarget | None:
    """The mirror a config asks for, or None. The only place that reads the config keys for it.

    `experience_buffer.storage_type: sql` turns it on; `path` is the URL (default: a SQLite file
    `<name>.db` in the run's job directory) and `name` the table.
    """
    buffer = cfg.buffer.trainer_input.experience_buffer
    if buffer.storage_type != "sql":
        return None
    url = buffer.path or f"sqlite:///{(cfg.job_dir / f'{buffer.name}.db').absolute()}"
    return MirrorTarget(url=url, table=buffer.name)


@contextmanager
def experience_mirror(
    cfg: RftConfig, decode: TokenDecoder | None = None
) -> Iterator[ExperienceMirror | None]:
    """The configured mirror, open for the block (None when the config asks for none)."""
    target = mirror_target(cfg)
    if target is None:
        yield None
        return
    mirror = ExperienceMirror(target.url, target.table, decode=decode)
    try:
        yield mirror
    finally:
        mirror.close()


class ExperienceMirror:
    """Inserts Experience events into one SQL table, in batches, once per experience id."""

    def __init__(
        self,
        url: str,
        table: str,
        *,
        decode: TokenDecoder | None = None,
        codec: EventCodec | None = None,
    ) -> None:
        from rft.storage.sql_database import SqlDatabase

        self.decode = decode
        self.codec = codec or EventCodec.default()
        self.database = SqlDatabase(url, key="buffer.trainer_input.experience_buffer.path")
        self.where = f"{self.database.where} table {table!r}"
        try:
            if self.database.sqlite_file is not None:
                self.database.sqlite_file.parent.mkdir(parents=True, exist_ok=True)
            self.table = _open_table(self.database, table)
        except BaseException:
            self.database.close()
            raise
        self.inserted = 0
        log.info("mirroring experiences into %s", self.where)

    def write(self, experiences: Iterable[Experience]) -> int:
        """Insert the experiences not in the table yet; return how many rows were added."""
        added = 0
        pending: dict[str, Experience] = {}
        for exp in experiences:
            pending.setdefault(exp.experience_id, exp)
            if len(pending) >= BATCH_ROWS:
                added += self._insert(pending)
                pending = {}
        if pending:
            added += self._insert(pending)
        self.inserted += added
        return added

    def _insert(self, batch: dict[str, Experience]) -> int:
        rows = [self._row(e) for e in batch.values()]
        try:
            return self.database.insert_new(self.table, rows, key="experience_id")
        except StorageError as exc:  # the database's SqlError
            raise StorageError(
                f"experience mirror {self.where}: insert of {len(batch)} experiences failed: {exc}"
            ) from exc

    def _row(self, exp: Experience) -> dict[str, Any]:
        return {
            "experience_id": exp.experience_id,
            "prompt": exp.prompt_text or self._text(exp.prompt_ids),
            "response": exp.response_text or self._text(exp.response_ids),
            "message_list": None,
            "reward": exp.reward,
            "model_version": exp.model_version,
            "experience_bytes": self.codec.encode(exp),
            "consumed": 0,
        }

    def _text(self, ids: Any) -> str | None:
        return self.decode(ids.tolist()) if self.decode is not None and len(ids) else None

    def close(self) -> None:
        self.database.close()
        log.info("experience mirror %s: %d rows added", self.where, self.inserted)


def experience_columns() -> list[Column]:
    """Trinity-RFT's experience table columns, plus the unique `experience_id`."""
    from rft.storage.sql_database import Column

    return [
        Column("id", "int32", primary_key=True, autoincrement=True),
        Column("prompt", "text"),
        Column("response", "text"),
        Column("message_list", "json"),
        Column("reward", "float64"),
        Column("model_version", "int32"),
        Column("experience_bytes", "bytes"),
        Column("consumed", "int32", default=0, index=True),
        Column("experience_id", "string", 512, nullable=False, unique=True),
    ]


def _open_table(database: SqlDatabase, name: str) -> SqlTable:
    """The table, created if absent; an existing one must have every column the mirror writes."""
    wanted = experience_columns()
    if database.has_table(name):
        present = set(database.column_names(name))
        missing = [c.name for c in wanted if c.name not in present]
        if missing:
            raise ConfigError(
                f"experience mirror: table {name!r} at {database.where} exists without the "
                f"columns {missing}; rft needs `experience_id` to insert each experience once. "
                "Point buffer.trainer_input.experience_buffer.path or name elsewhere"
            )
    return database.create_table(name, wanted)
