"""SqlDatabase: rft's one way to a SQL database (SQLAlchemy is imported here and nowhere else).

The `sql` metric sink, the experience mirror and the export and import of experiences keep tables
in a database named by a SQLAlchemy URL. They describe a table as `Column` specs and read and write
rows as dicts; this module makes the SQLAlchemy tables and statements from those, and turns
SQLAlchemy's errors into rft's: a URL that does not parse, or whose driver is not installed, is a
ConfigError; a statement that fails is a SqlError (a StorageError) naming the database, its
password hidden. Open a database as a context manager: leaving the block disposes its connections.

Nothing connects before the first statement (a SQLite file is created then); each write is one
transaction.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

import sqlalchemy as sa
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from rft.errors import ConfigError, StorageError

ColumnKind = Literal["text", "string", "int32", "int64", "float64", "bool", "bytes", "json"]


class SqlError(StorageError):
    """A statement on a SQL database failed (unreachable server, missing table, a constraint);
    the message names the database (password hidden) and the table."""


@dataclass(frozen=True)
class Column:
    """One column of a table rft creates. `length` bounds a `string` column (VARCHAR); a `json`
    column stores None as SQL NULL."""

    name: str
    kind: ColumnKind
    length: int | None = None
    nullable: bool = True
    primary_key: bool = False
    autoincrement: bool = False
    unique: bool = False
    index: bool = False
    default: Any = None


@dataclass(frozen=True)
class SqlTable:
    """A table of an open `SqlDatabase`, as created or found there."""

    name: str
    columns: tuple[str, ...]
    _table: sa.Table = field(repr=False)


# a password in a URL that did not parse is still kept out of messages
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


class SqlDatabase:
    """The database at `url`. `key` names where the URL came from (a config key, an option)
    in the error a bad URL gets."""

    def __init__(self, url: str, *, key: str | None = None) -> None:
        named = f"{key} {_hidden(url)!r}" if key else repr(_hidden(url))
        try:
            parsed = sa.engine.make_url(url)
            self._engine = sa.create_engine(parsed)
        except (
            ArgumentError,
            ValueError,
        ) as exc:  # no `dialect://`, an unknown dialect, a bad port
            raise ConfigError(f"{named} is not a usable SQLAlchemy URL: {exc}") from exc
        except ImportError as exc:  # the dialect's driver package
            raise ConfigError(f"{named}: its database driver is not installed: {exc}") from exc
        self.where = parsed.render_as_string(hide_password=True)

    @property
    def sqlite_file(self) -> Path | None:
        """The file of a SQLite database (None for another backend or an in-memory one)."""
        url = self._engine.url
        if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
            return None
        return Path(url.database).expanduser()

    # -- tables ---------------------------------------------------------------------------------

    def has_table(self, name: str) -> bool:
        with self._errors(f"looking for table {name!r}"):
            return bool(sa.inspect(self._engine).has_table(name))

    def column_names(self, name: str) -> list[str]:
        """The columns of the existing table `name`, in the database's order."""
        with self._errors(f"reading the columns of table {name!r}"):
            return [str(c["name"]) for c in sa.inspect(self._engine).get_columns(name)]

    def create_table(self, name: str, columns: Sequence[Column]) -> SqlTable:
        """The table `name` with `columns`, created unless it exists (an existing table is taken
        as it is: check `column_names` first where its shape matters)."""
        table = sa.Table(name, sa.MetaData(), *(_column(c) for c in columns))
        with self._errors(f"creating table {name!r}"):
            table.metadata.create_all(self._engine)
        return SqlTable(name, tuple(c.name for c in columns), table)

    def table(self, name: str) -> SqlTable:
        """The existing table `name`, with the columns the database has."""
        meta = sa.MetaData()
        with self._errors(f"reading table {name!r}"):
            meta.reflect(self._engine, only=[name])
        table = meta.tables[name]
        return SqlTable(name, tuple(c.name for c in table.columns), table)

    def drop_table(self, name: str) -> None:
        with self._errors(f"dropping table {name!r}"), self._engine.begin() as conn:
            meta = sa.MetaData()
            meta.reflect(conn, only=[name])
            meta.tables[name].drop(conn)

    # -- rows -----------------------------------------------------------------------------------

    def insert(self, table: SqlTable, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert `rows`, all or none (one transaction)."""
        if not rows:
            return
        doing = f"inserting {len(rows)} row(s) into {table.name!r}"
        with self._errors(doing), self._engine.begin() as conn:
            conn.execute(table._table.insert(), list(rows))

    def insert_new(self, table: SqlTable, rows: Sequence[Mapping[str, Any]], key: str) -> int:
        """Insert the rows whose `key` column value is in the table in no row yet (the first of
        rows that share one), in one transaction; how many were inserted."""
        fresh: dict[Any, Mapping[str, Any]] = {}
        for row in rows:
            fresh.setdefault(row[key], row)
        if not fresh:
            return 0
        column = table._table.c[key]
        doing = f"inserting {len(fresh)} row(s) into {table.name!r}"
        with self._errors(doing), self._engine.begin() as conn:
            present = set(conn.scalars(sa.select(column).where(column.in_(list(fresh)))))
            new = [row for value, row in fresh.items() if value not in present]
            if new:
                conn.execute(table._table.insert(), new)
        return len(new)

    def count(self, table: SqlTable) -> int:
        with self._errors(f"counting the rows of {table.name!r}"), self._engine.connect() as conn:
            query = sa.select(sa.func.count()).select_from(table._table)
            return int(conn.execute(query).scalar_one())

    def batches(
        self, table: SqlTable, *, order_by: Sequence[str], rows: int
    ) -> Iterator[list[dict[str, Any]]]:
        """Every row of `table` ordered by the columns `order_by`, `rows` at a time, streamed
        from the server (memory holds one batch)."""
        query = sa.select(table._table).order_by(*(table._table.c[c] for c in order_by))
        with self._errors(f"reading table {table.name!r}"), self._engine.connect() as conn:
            result = conn.execution_options(stream_results=True).execute(query)
            while chunk := result.fetchmany(rows):
                yield [dict(r._mapping) for r in chunk]

    # -- closing --------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the pooled connections (rows already committed stay)."""
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """A SQLAlchemy error raised in the block, as a SqlError that says what failed where."""
        try:
            yield
        except SQLAlchemyError as exc:
            raise SqlError(f"database {self.where}: {doing} failed: {exc}") from exc


_TYPES: dict[str, Any] = {
    "text": sa.Text,
    "int32": sa.Integer,
    "int64": sa.BigInteger,
    "float64": sa.Float(precision=53),
    "bool": sa.Boolean,
    "bytes": sa.LargeBinary,
    "json": sa.JSON(none_as_null=True),
}


def _column(spec: Column) -> sa.Column[Any]:
    kind = sa.String(spec.length) if spec.kind == "string" else _TYPES[spec.kind]
    return sa.Column(
        spec.name,
        kind,
        nullable=spec.nullable and not spec.primary_key,
        primary_key=spec.primary_key,
        autoincrement=True if spec.autoincrement else "auto",
        unique=spec.unique or None,
        index=spec.index or None,
        default=spec.default,
    )


def _hidden(url: str) -> str:
    return _PASSWORD.sub(r"\1***@", url)
