"""`rft replay` as a user runs it, against the real broker: export to Parquet, JSONL and SQLite,
import back into new topics (field-by-field equal), ranges and filters, and re-scoring."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from rft.config.connections import StackSettings
from rft.consumers.replay.topic_range import RangeReader
from rft.events.models import Experience, Metric, Task
from rft.events.reader import Envelope
from rft.events.topics import TopicNames, ensure_topics
from rft.events.writer import EventWriter

pytestmark = pytest.mark.integration

GROUPS = 12
REPEAT = 3


def rft(stack: StackSettings, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "rft.cli.main", *args, "--bootstrap", stack.kafka.bootstrap_servers],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stderr


def task(i: int) -> Task:
    return Task(
        task_id=f"arith:0:{i}",
        taskset="arith",
        epoch=0,
        index=i,
        payload={"question": f"What is {i} + 2?", "answer": i + 2},
        format={"prompt_key": "question", "response_key": "answer"},
        workflow="math_workflow",
        reward_fn="math_reward",
    )


def experience(i: int, k: int, rng: np.random.Generator) -> Experience:
    """Rollout k of task i: rollout 0 answers right, the others wrong; the logged reward is a
    placeholder (0.25) so a re-score visibly replaces it."""
    n = int(rng.integers(0, 40))
    return Experience(
        experience_id=f"arith:0:{i}:x:{k}",
        task_id=f"arith:0:{i}",
        group_id=f"arith:0:{i}:x",
        group_size=REPEAT,
        explorer_id=f"host-{i % 2}",
        explorer_group="proj.run.explorer.main",
        model_version=i // 3,
        prompt_ids=rng.integers(0, 50_000, size=int(rng.integers(1, 30)), dtype=np.int32),
        response_ids=rng.integers(0, 50_000, size=n, dtype=np.int32),
        logprobs=-rng.random(n, dtype=np.float32) * 5,
        action_mask=rng.random(n) > 0.1,
        reward=0.25,
        token_rewards=rng.random(n, dtype=np.float32) if k == 1 else None,
        response_text=f"The sum is {i + 2}." if k == 0 else f"I think {i + 3}",
        info={"parsed": str(i), "note": "ünïcode ✓"},
        truncated=k == 2,
        metrics={"gen_s": 0.5 + k},
        logprob_temperature=0.8,
        created_at=1_767_225_600_000 + i,
    )


@pytest.fixture
def logged_run(stack: StackSettings, unique: str) -> tuple[TopicNames, list[Experience], int]:
    """A run's topics with tasks and experiences written as explorers write them: one Kafka
    transaction per step, an aborted step in between, and one metric on the experience topic.
    Returns the topics, the experiences and a timestamp between the two halves."""
    names = TopicNames.for_run(unique, "run")
    ensure_topics(stack.kafka, names)
    rng = np.random.default_rng(7)
    exps = [experience(i, k, rng) for i in range(GROUPS) for k in range(REPEAT)]
    with EventWriter.open(stack.kafka) as plain:
        for i in range(GROUPS):
            plain.send(names.tasks, task(i), key=task(i).task_id)
        plain.send(names.experiences, Metric(component="x", run="r", step=1, values={"a": 1.0}))
    half = len(exps) // 2
    middle_ms = 0
    with EventWriter.open(stack.kafka, transactional_id=f"tx-{unique}") as tx:
        for start in range(0, len(exps), REPEAT * 2):
            if start == half:
                tx.flush()
                time.sleep(0.05)
                middle_ms = int(time.time() * 1000)
                time.sleep(0.05)
            tx.begin()
            for e in exps[start : start + REPEAT * 2]:
                tx.send(names.experiences, e, key=e.task_id)
            tx.commit()
            tx.begin()
            tx.send(names.experiences, exps[0], key="aborted")  # never visible
            tx.abort()
    return names, exps, middle_ms


def read_all(stack: StackSettings, topic: str) -> list[Envelope]:
    with RangeReader.open(stack.kafka, [topic]) as reader:
        return [env for batch in reader.batches() for env in batch]


def by_id(envs: list[Envelope]) -> dict[str, Experience]:
    out = {e.event.experience_id: e.event for e in envs if isinstance(e.event, Experience)}
    return out


def test_export_and_import_round_trip_in_every_format(
    stack: StackSettings, unique: str, logged_run, tmp_path: Path
) -> None:
    names, exps, _ = logged_run
    run = ["--project", unique, "--name", "run"]
    original = read_all(stack, names.experiences)
    assert sorted(by_id(original)) == sorted(e.experience_id for e in exps)
    assert by_id(original) == {e.experience_id: e for e in exps}
    outputs = {
        "parquet": tmp_path / "x.parquet",
        "jsonl": tmp_path / "x.jsonl",
        "sql": tmp_path / "x.db",
    }
    for fmt, out in outputs.items():
        said = ok(rft(stack, "replay", "export", *run, "-o", str(out)))
        assert f"{len(exps)} experience(s) of {len(exps) + 1} event(s)" in said
        assert "1 other event(s) skipped" in said
        assert not Path(str(out) + ".partial").exists()
        target = f"{unique}.copy-{fmt}"
        said = ok(rft(stack, "replay", "import", str(out), target))
        assert f"{len(exps)} experience(s) written to {target}" in said
        copied = read_all(stack, target)
        assert len(copied) == len(exps)
        assert by_id(copied) == by_id(original), fmt
        # a rollout group stays in one partition, keyed by task id as the explorer keys it
        for tid in {e.task_id for e in exps}:
            assert len({c.partition for c in copied if c.event.task_id == tid}) == 1
    # what the files hold: token ids and logprobs as lists, the source of every row
    table = pq.read_table(outputs["parquet"])
    rows = {r["experience_id"]: r for r in table.to_pylist()}
    first = next(o for o in original if isinstance(o.event, Experience))
    row = rows[first.event.experience_id]
    assert row["response_ids"] == first.event.response_ids.tolist()
    assert np.array_equal(np.array(row["logprobs"], np.float32), first.event.logprobs)
    assert (row["source_topic"], row["source_partition"], row["source_offset"]) == (
        first.topic,
        first.partition,
        first.offset,
    )
    line = json.loads(outputs["jsonl"].read_text().splitlines()[0])
    assert isinstance(line["prompt_ids"], list) and isinstance(line["info"], dict)
    with sqlite3.connect(outputs["sql"]) as db:
        (count,) = db.execute("select count(*) from experiences").fetchone()
    assert count == len(exps)
    # an existing output, or a topic with records, is not written over by accident
    again = rft(stack, "replay", "export", *run, "-o", str(outputs["parquet"]))
    assert again.returncode == 1 and "--overwrite" in again.stderr
    again = rft(stack, "replay", "import", str(outputs["jsonl"]), f"{unique}.copy-parquet")
    assert again.returncode == 1 and "already holds" in again.stderr


def test_export_ranges_and_filters_select_exactly_their_events(
    stack: StackSettings, unique: str, logged_run, tmp_path: Path
) -> None:
    names, exps, middle_ms = logged_run
    run = ["--project", unique, "--name", "run"]
    original = [e for e in read_all(stack, names.experiences) if isinstance(e.event, Experience)]

    def exported(*args: str) -> set[str]:
        out = tmp_path / f"sel-{time.monotonic_ns()}.jsonl"
        ok(rft(stack, "replay", "export", *run, "-o", str(out), *args))
        return {json.loads(line)["experience_id"] for line in out.read_text().splitlines()}

    ends = {
        p: max(e.offset for e in original if e.partition == p)
        for p in {0, 1, 2, 3}
        if any(e.partition == p for e in original)
    }
    p, last = next(iter(ends.items()))
    want = {e.event.experience_id for e in original if e.partition == p and e.offset >= last}
    assert (
        exported(
            "--from-offsets",
            f"{p}={last}",
            "--to-offsets",
            ",".join(f"{q}=0" for q in ends if q != p),
        )
        == want
    )
    late = {e.event.experience_id for e in original if e.timestamp_ms >= middle_ms}
    assert late and late != {e.experience_id for e in exps}
    assert exported("--from-time", str(middle_ms)) == late
    assert exported("--to-time", str(middle_ms)) == {e.experience_id for e in exps} - late
    v = {e.experience_id for e in exps if 1 <= e.model_version <= 2 and e.explorer_id == "host-1"}
    assert exported("--min-version", "1", "--max-version", "2", "--explorer", "host-1") == v
    assert exported("--task-id", "arith:0:4", "--min-reward", "0.2", "--max-reward", "0.3") == {
        e.experience_id for e in exps if e.task_id == "arith:0:4"
    }
    assert exported("--min-reward", "0.3") == set()


def test_rescore_writes_new_rewards_with_a_pointer_to_the_original(
    stack: StackSettings, unique: str, logged_run
) -> None:
    names, exps, _ = logged_run
    target = f"{unique}.rescored"
    said = ok(
        rft(
            stack,
            "replay",
            "rescore",
            "--project",
            unique,
            "--name",
            "run",
            "--reward-fn",
            "math_reward",
            "--reward-args",
            '{"correct_reward": 2.0}',
            "-o",
            target,
        )
    )
    assert f"{GROUPS} task(s) from {names.tasks}" in said
    original = {
        e.event.experience_id: e
        for e in read_all(stack, names.experiences)
        if isinstance(e.event, Experience)
    }
    rescored = by_id(read_all(stack, target))
    assert sorted(rescored) == sorted(original)
    for exp_id, new in rescored.items():
        env = original[exp_id]
        old: Experience = env.event  # type: ignore[assignment]
        right = exp_id.endswith(":0")  # rollout 0 of every task states the right sum
        assert new.reward == (2.0 if right else 0.0)
        assert new.info["rescore.source"] == f"{env.topic}[{env.partition}]@{env.offset}"
        assert new.info["rescore.reward_fn"] == "math_reward"
        assert new.info["rescore.original_reward"] == "0.25"
        assert new.info["note"] == old.info["note"]
        assert new.token_rewards is None
        for field in ("group_id", "explorer_id", "model_version", "task_id", "created_at"):
            assert getattr(new, field) == getattr(old, field)
        assert np.array_equal(new.logprobs, old.logprobs)
    assert "mean reward 0.2500 -> 0.6667" in said


def test_rescore_without_the_task_names_the_experience(stack: StackSettings, unique: str) -> None:
    names = TopicNames.for_run(unique, "orphan")
    ensure_topics(stack.kafka, names)
    exp = experience(1, 0, np.random.default_rng(0))
    with EventWriter.open(stack.kafka) as writer:
        writer.send(names.experiences, exp, key=exp.task_id)
        writer.send(names.tasks, task(2), key=task(2).task_id)
    done = rft(
        stack,
        "replay",
        "rescore",
        names.experiences,
        "--reward-fn",
        "math_reward",
        "-o",
        f"{unique}.out",
    )
    assert done.returncode == 1
    assert f"{names.experiences}[" in done.stderr and "task 'arith:0:1'" in done.stderr
    skipped = ok(
        rft(
            stack,
            "replay",
            "rescore",
            names.experiences,
            "--reward-fn",
            "math_reward",
            "-o",
            f"{unique}.out",
            "--skip-missing-tasks",
            "--append",
        )
    )
    assert "1 without a task skipped" in skipped
    bad = rft(
        stack,
        "replay",
        "rescore",
        names.experiences,
        "--reward-fn",
        "math_rewad",
        "-o",
        f"{unique}.out2",
    )
    assert bad.returncode == 1 and "did you mean 'math_reward'" in bad.stderr
