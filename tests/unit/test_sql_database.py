"""SqlDatabase, rft's one way to SQL: tables from Column specs, rows as dicts, SQLAlchemy's errors
turned into rft's (naming the database, never its password), connections closed on leaving."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from rft.catalog import load_config
from rft.config.loader import ConfigValidationError
from rft.errors import ConfigError, StorageError
from rft.storage.sql_database import Column, SqlDatabase, SqlError

COLUMNS = [
    Column("key", "string", 64, primary_key=True),
    Column("n", "int64", nullable=False),
    Column("x", "float64"),
    Column("flag", "bool"),
    Column("blob", "bytes"),
    Column("doc", "json"),
    Column("note", "text"),
]


def rows(*keys: str) -> list[dict[str, object]]:
    return [
        {"key": k, "n": 2**40 + i, "x": 0.1 * i, "flag": i % 2 == 0, "blob": k.encode(),
         "doc": {"i": i, "k": [k]} if i else None, "note": f"row {k}"}
        for i, k in enumerate(keys)
    ]  # fmt: skip


def test_rows_go_in_and_come_back_in_order_with_their_types(tmp_path: Path) -> None:
    path = tmp_path / "db" / "x.db"
    path.parent.mkdir()
    with SqlDatabase(f"sqlite:///{path}") as db:
        assert db.sqlite_file == path
        table = db.create_table("t", COLUMNS)
        db.insert(table, rows("c", "a", "b"))
        assert db.count(table) == 3
        got = [r for batch in db.batches(table, order_by=["key"], rows=2) for r in batch]
        assert db.column_names("t") == [c.name for c in COLUMNS]
    assert got == sorted(rows("c", "a", "b"), key=lambda r: str(r["key"]))
    with sqlite3.connect(path) as con:  # the file holds them, with the declared nullability
        assert con.execute("select count(*) from t").fetchone() == (3,)
        info = {name: notnull for _, name, _, notnull, _, _ in con.execute("pragma table_info(t)")}
    assert info["n"] == 1 and info["x"] == 0


def test_insert_new_adds_each_key_once(tmp_path: Path) -> None:
    with SqlDatabase(f"sqlite:///{tmp_path / 'x.db'}") as db:
        table = db.create_table("t", COLUMNS)
        assert db.insert_new(table, rows("a", "b"), key="key") == 2
        again = rows("b", "c", "c")
        assert db.insert_new(table, again, key="key") == 1  # b is there, c twice counts once
        assert db.count(table) == 3
        assert db.insert_new(table, [], key="key") == 0


def test_an_existing_table_is_read_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with sqlite3.connect(path) as con:
        con.execute("create table old (a integer, b text)")
        con.execute("insert into old values (2, 'two'), (1, 'one')")
    with SqlDatabase(str(f"sqlite:///{path}")) as db:
        assert db.has_table("old") and not db.has_table("new")
        table = db.table("old")
        assert table.columns == ("a", "b")
        assert next(db.batches(table, order_by=["a"], rows=10)) == [
            {"a": 1, "b": "one"},
            {"a": 2, "b": "two"},
        ]
        db.drop_table("old")
        assert not db.has_table("old")


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("not a url", "is not a usable SQLAlchemy URL"),
        ("nosuchdialect://h/db", "is not a usable SQLAlchemy URL"),
        ("postgresql://u:secret@h:notaport/db", "is not a usable SQLAlchemy URL"),
        ("mssql+pymssql://u:secret@h/db", "its database driver is not installed"),
    ],
)
def test_a_bad_url_is_a_config_error_naming_its_key_without_the_password(
    url: str, said: str
) -> None:
    with pytest.raises(ConfigError, match=said) as caught:
        SqlDatabase(url, key="some.key")
    assert str(caught.value).startswith("some.key ")
    assert "secret" not in str(caught.value)


def test_a_failed_statement_is_a_storage_error_naming_database_and_table(tmp_path: Path) -> None:
    with SqlDatabase(f"sqlite:///{tmp_path / 'x.db'}") as db:
        table = db.create_table("t", COLUMNS)
        db.insert(table, rows("a"))
        with pytest.raises(
            SqlError, match=r"x\.db: inserting 1 row\(s\) into 't' failed"
        ) as caught:
            db.insert(table, rows("a"))  # the primary key is taken
        assert isinstance(caught.value, StorageError)
        assert db.count(table) == 1  # the failed transaction left nothing
    missing = tmp_path / "no-such-dir" / "x.db"
    with SqlDatabase(f"sqlite:///{missing}") as db, pytest.raises(SqlError, match="looking for"):
        db.has_table("t")


def test_the_config_refuses_a_sql_buffer_path_that_is_no_url(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(
        "project: p\nname: n\nmode: train\nmodel: {model_path: tiny}\nalgorithm: {repeat_times: 2}\n"
        f"checkpoint_root_dir: {tmp_path / 'ckpt'}\n"
        "buffer:\n  batch_size: 2\n  total_steps: 1\n  trainer_input:\n    experience_buffer:\n"
        "      name: exp\n      storage_type: sql\n      path: 'just/a/file.db'\n"
    )
    with pytest.raises(
        ConfigValidationError, match=r"experience_buffer\.path.*not a SQLAlchemy URL"
    ):
        load_config(config)
    config.write_text(config.read_text().replace("just/a/file.db", "sqlite:///exp.db"))
    cfg = load_config(config)
    assert cfg.buffer.trainer_input.experience_buffer.path == "sqlite:///exp.db"
