"""ExperienceMirror against a real SQLite file: Trinity-RFT's table shape, rows equal to the
experiences, and idempotent re-inserts (a resumed trainer reads experiences again)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rft.catalog import load_config
from rft.consumers.replay import mirror as mirror_module
from rft.consumers.replay.mirror import ExperienceMirror, experience_mirror, mirror_target
from rft.consumers.run_plan import RunPlan
from rft.errors import ConfigError
from rft.events.codec import EventCodec
from rft.events.models import Experience
from tests.unit.event_strategies import experiences

# Trinity-RFT's experience table (trinity/buffer/schema/sql_schema.py), column -> SQL type
TRINITY_COLUMNS = {
    "id": "INTEGER",
    "prompt": "TEXT",
    "response": "TEXT",
    "message_list": "JSON",
    "reward": "FLOAT",
    "model_version": "INTEGER",
    "experience_bytes": "BLOB",
    "consumed": "INTEGER",
}


def make_experience(i: int, *, version: int = 0, text: bool = True) -> Experience:
    rng = np.random.default_rng(i)
    n = 3 + i % 4
    return Experience(
        experience_id=f"arith:0:{i // 4}:explorer-a:g{i // 4}:{i % 4}",
        task_id=f"arith:0:{i // 4}",
        group_id=f"arith:0:{i // 4}:explorer-a:g{i // 4}",
        group_size=4,
        explorer_id="explorer-a",
        model_version=version,
        prompt_ids=rng.integers(0, 100, size=5),
        response_ids=rng.integers(0, 100, size=n),
        logprobs=-rng.random(n).astype(np.float32),
        reward=float(i % 2),
        prompt_text="",
        response_text=f"The answer is {i}." if text else "",
        info={"correct": str(float(i % 2))},
    )


def read_rows(url: str, table: str) -> list[dict]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(sa.text(f'SELECT * FROM "{table}"'))]
    engine.dispose()
    return rows


def fake_decode(ids: list[int]) -> str:
    return " ".join(f"<{t}>" for t in ids)


def test_rows_equal_the_experiences_in_trinity_shape(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sub' / 'gsm8k.db'}"
    exps = [make_experience(i, version=i // 4, text=i != 2) for i in range(8)]
    mirror = ExperienceMirror(url, "gsm8k_buffer", decode=fake_decode)
    assert mirror.write(exps) == 8
    mirror.close()

    inspector = sa.inspect(sa.create_engine(url))
    columns = {c["name"]: str(c["type"]) for c in inspector.get_columns("gsm8k_buffer")}
    assert {k: columns[k] for k in TRINITY_COLUMNS} == TRINITY_COLUMNS
    assert set(columns) - set(TRINITY_COLUMNS) == {"experience_id"}

    rows = read_rows(url, "gsm8k_buffer")
    assert [r["id"] for r in rows] == list(range(1, 9))
    codec = EventCodec.default()
    for row, exp in zip(rows, exps, strict=True):
        assert row["experience_id"] == exp.experience_id
        assert codec.decode(row["experience_bytes"]) == exp
        assert row["reward"] == exp.reward
        assert row["model_version"] == exp.model_version
        assert row["prompt"] == fake_decode(exp.prompt_ids.tolist())  # no prompt_text: decoded
        expected = exp.response_text or fake_decode(exp.response_ids.tolist())
        assert row["response"] == expected
        assert row["message_list"] is None
        assert row["consumed"] == 0


def test_reinsert_adds_only_new_experiences(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'buffer.db'}"
    first = [make_experience(i) for i in range(6)]
    mirror = ExperienceMirror(url, "experience_buffer")
    assert mirror.write(first) == 6
    assert mirror.write(first[2:]) == 0
    mirror.close()
    # a resumed trainer (a new process) reads from its checkpoint's offsets: some seen, some new
    resumed = ExperienceMirror(url, "experience_buffer")
    again = first[4:] + [make_experience(i) for i in range(6, 9)]
    assert resumed.write(again) == 3
    resumed.close()
    rows = read_rows(url, "experience_buffer")
    assert [r["experience_id"] for r in rows] == [e.experience_id for e in first] + [
        make_experience(i).experience_id for i in range(6, 9)
    ]


def test_batches_larger_than_one_insert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mirror_module, "BATCH_ROWS", 7)
    url = f"sqlite:///{tmp_path / 'b.db'}"
    exps = [make_experience(i) for i in range(30)]
    mirror = ExperienceMirror(url, "t")
    assert mirror.write(iter(exps[:20])) == 20
    assert mirror.write(iter(exps)) == 10
    mirror.close()
    assert sorted(r["experience_id"] for r in read_rows(url, "t")) == sorted(
        e.experience_id for e in exps
    )


@given(
    batch=st.lists(experiences(), min_size=1, max_size=4),
    chunks=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    repeat=st.integers(0, 5),
)
# an experience draws up to 4096 tokens and 9,000-character ids: large inputs on purpose
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.data_too_large, HealthCheck.too_slow],
)
def test_one_row_per_experience_id_whatever_the_order(
    batch: list[Experience], chunks: list[int], repeat: int
) -> None:
    stream = batch + batch[: repeat % (len(batch) + 1)]  # ids repeat, as after a resume
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/p.db"
        mirror = ExperienceMirror(url, "buffer")
        start, i = 0, 0
        while start < len(stream):
            size = chunks[i % len(chunks)]
            mirror.write(stream[start : start + size])
            start, i = start + size, i + 1
        mirror.close()
        rows = read_rows(url, "buffer")
    first_seen: dict[str, Experience] = {}
    for exp in stream:
        first_seen.setdefault(exp.experience_id, exp)
    assert [r["experience_id"] for r in rows] == list(first_seen)
    codec = EventCodec.default()
    for row in rows:
        assert codec.decode(row["experience_bytes"]) == first_seen[row["experience_id"]]


def test_table_without_experience_id_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'trinity.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE buf (id INTEGER PRIMARY KEY, prompt TEXT)"))
    engine.dispose()
    with pytest.raises(
        ConfigError, match=r"table 'buf' .* without the columns \[.*'experience_id'"
    ):
        ExperienceMirror(url, "buf")


def test_bad_url_names_the_config_key() -> None:
    with pytest.raises(ConfigError, match="experience_buffer.path 'not a url'"):
        ExperienceMirror("not a url", "t")


def config_with_mirror(tmp_path: Path, path: str | None) -> object:
    config = tmp_path / "run.yaml"
    text = (
        "project: p\nname: n\nmode: train\nmodel: {model_path: tiny}\n"
        "algorithm: {repeat_times: 2}\n"
        f"checkpoint_root_dir: {tmp_path / 'ckpt'}\nbuffer: {{batch_size: 2, total_steps: 1}}\n"
    )
    config.write_text(text)
    assert mirror_target(load_config(config)) is None  # the default buffer: the topic only
    buffer = "  trainer_input:\n    experience_buffer:\n      name: gsm8k_buffer\n"
    buffer += "      storage_type: sql\n" + (f"      path: '{path}'\n" if path else "")
    config.write_text(
        text.replace("buffer: {batch_size: 2, total_steps: 1}\n", "")
        + ("buffer:\n  batch_size: 2\n  total_steps: 1\n" + buffer)
    )
    return load_config(config)


def test_config_turns_the_mirror_on_and_the_topic_stays(tmp_path: Path) -> None:
    cfg = config_with_mirror(tmp_path, "sqlite:///gsm8k.db")
    target = mirror_target(cfg)  # type: ignore[arg-type]
    assert target is not None
    assert (target.url, target.table) == ("sqlite:///gsm8k.db", "gsm8k_buffer")
    plan = RunPlan(cfg)  # type: ignore[arg-type]
    assert plan.experience_topic == plan.topics.experiences

    cfg = config_with_mirror(tmp_path, None)
    with experience_mirror(cfg) as mirror:  # type: ignore[arg-type]
        assert mirror is not None
        mirror.write([make_experience(0)])
    db = tmp_path / "ckpt" / "p" / "n" / "gsm8k_buffer.db"
    assert len(read_rows(f"sqlite:///{db}", "gsm8k_buffer")) == 1
