"""Experiences as export rows: Parquet (Arrow), JSON and SQL shapes read back equal, bit for bit."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.consumers.replay.export import experience_columns
from rft.errors import ReplayError
from rft.events.models import Experience
from rft.replay.experience_rows import (
    EXPERIENCE_COLUMNS,
    FIELD_KINDS,
    ExportRow,
    arrow_schema,
    columns,
    from_arrow,
    from_json_object,
    from_sql_row,
    to_arrow,
    to_json_object,
    to_sql_row,
)
from tests.unit.event_strategies import experiences


def rows_of(exps: list[Experience]) -> list[ExportRow]:
    return [
        ExportRow(e, "p.n.experiences", i % 3, 10 * i, 1_700_000_000_000 + i)
        for i, e in enumerate(exps)
    ]


def canonical_nans(exp: Experience) -> Experience:
    """JSON keeps a NaN but not its payload bits: give array NaNs the one canonical pattern."""

    def fix(a: np.ndarray | None) -> np.ndarray | None:
        if a is None or a.dtype.kind != "f":
            return a
        return np.where(np.isnan(a), np.float32(np.nan), a).astype(a.dtype)

    return dataclasses.replace(
        exp, logprobs=fix(exp.logprobs), token_rewards=fix(exp.token_rewards)
    )


def test_every_experience_field_has_a_column_kind() -> None:
    assert set(FIELD_KINDS) == {f.name for f in dataclasses.fields(Experience)}
    assert columns(decoded=False)[4:] == list(EXPERIENCE_COLUMNS)
    assert arrow_schema(decoded=True).names == columns(decoded=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(experiences(), min_size=1, max_size=6))
def test_parquet_round_trip_keeps_every_field_bit_for_bit(exps: list[Experience]) -> None:
    schema = arrow_schema(decoded=False)
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema) as writer:
        writer.write_batch(to_arrow(rows_of(exps), schema))
    table = pq.read_table(pa.BufferReader(sink.getvalue()))
    (batch,) = table.to_batches(max_chunksize=len(exps))
    back = list(from_arrow(batch, "mem.parquet"))
    assert back == exps
    assert table.column("source_offset").to_pylist() == [10 * i for i in range(len(exps))]


@settings(max_examples=60, deadline=None)
@given(st.lists(experiences(), min_size=1, max_size=4))
def test_json_round_trip_keeps_every_field(exps: list[Experience]) -> None:
    exps = [canonical_nans(e) for e in exps]
    lines = [json.dumps(to_json_object(r), ensure_ascii=False) for r in rows_of(exps)]
    back = [from_json_object(json.loads(line), f"mem:{i}") for i, line in enumerate(lines)]
    assert back == exps


@settings(max_examples=40, deadline=None)
@given(st.lists(experiences(), min_size=1, max_size=4))
def test_sql_round_trip_through_sqlite_keeps_every_field(exps: list[Experience]) -> None:
    from rft.storage.sql_database import SqlDatabase

    exps = [canonical_nans(e) for e in exps]
    with SqlDatabase("sqlite://") as db:
        table = db.create_table("experiences", experience_columns(decoded=False))
        db.insert(table, [to_sql_row(r) for r in rows_of(exps)])
        got = [r for batch in db.batches(table, order_by=["source_offset"], rows=3) for r in batch]
    back = [from_sql_row(r, "mem") for r in got]
    assert back == exps


def test_decoded_text_columns_are_extra_and_ignored_on_the_way_back() -> None:
    exp = Experience(
        experience_id="e",
        task_id="t",
        group_id="g",
        group_size=1,
        explorer_id="x",
        model_version=2,
        prompt_ids=[1, 2],
        response_ids=[3],
        logprobs=[-0.5],
    )
    row = ExportRow(exp, "t", 0, 0, 0, prompt_decoded="ab", response_decoded="c")
    schema = arrow_schema(decoded=True)
    batch = to_arrow([row], schema)
    assert batch.column("response_decoded").to_pylist() == ["c"]
    assert list(from_arrow(batch, "x")) == [exp]
    assert to_json_object(row)["prompt_decoded"] == "ab"


def test_a_missing_column_or_bad_row_is_named() -> None:
    exp = Experience(
        experience_id="e",
        task_id="t",
        group_id="g",
        group_size=1,
        explorer_id="x",
        model_version=2,
        prompt_ids=[1],
        response_ids=[3, 4],
        logprobs=[-0.5, -0.1],
    )
    obj = to_json_object(ExportRow(exp, "t", 0, 0, 0))
    with pytest.raises(ReplayError, match=r"f.jsonl:7: no column\(s\) task_id"):
        from_json_object({k: v for k, v in obj.items() if k != "task_id"}, "f.jsonl:7")
    with pytest.raises(ReplayError, match=r"f.jsonl:8: not a valid experience: .*logprobs"):
        from_json_object(obj | {"logprobs": [-0.5]}, "f.jsonl:8")
    # columns with a default may be missing (exports made before the event had them)
    older = {k: v for k, v in obj.items() if k not in ("explorer_group", "logprob_temperature")}
    assert from_json_object(older, "old") == exp
