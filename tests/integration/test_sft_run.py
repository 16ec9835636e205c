"""`algorithm_type: sft` end to end on the real Kafka and MinIO with the tiny model: `rft run`
(mode train) renders a chat dataset, publishes it to the run's experience topic and trains it with
no explorer; the weights topic's trained logs name exactly the published events, each once. A run
stopped after one step resumes from its version and trains exactly the rest; a second start
publishes nothing again; one killed with SIGKILL mid-dataset (slow) resumes from its newest
version and trains exactly the rest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.replay.topic_range import RangeReader
from rft.consumers.run_plan import RunPlan
from rft.events.models import Experience, WeightVersion

pytestmark = pytest.mark.integration

ROWS, EPOCHS, BATCH = 6, 2, 4  # 12 events: 3 steps


def sft_run_config(stack: StackSettings, name: str, tmp: Path, rows: int = ROWS) -> Path:
    data = tmp / "chats.jsonl"
    with data.open("w") as out:
        for i in range(rows):
            chat = [
                {"role": "user", "content": f"What is {i} + {i}?"},
                {"role": "assistant", "content": f"It is {2 * i}."},
                {"role": "user", "content": "Sure?"},
                {"role": "assistant", "content": "Yes."},
            ]
            out.write(json.dumps({"messages": chat}) + "\n")
    raw = {
        "project": "rft-it",
        "name": name,
        "mode": "train",
        "checkpoint_root_dir": str(tmp / "ckpt"),
        "algorithm": {"algorithm_type": "sft"},
        "model": {"model_path": "tiny", "max_prompt_tokens": 64, "max_response_tokens": 64},
        "buffer": {
            "train_batch_size": BATCH,
            "total_epochs": EPOCHS,
            "trainer_input": {
                "experience_buffer": {
                    "name": "chats",
                    "storage_type": "file",
                    "path": str(data),
                    "format": {"prompt_type": "messages", "messages_key": "messages"},
                },
                # a dataset's rows (model_version 0) are never judged stale: a bound of 0 would
                # drop every row after the first step if it were applied
                "max_staleness": 0,
            },
        },
        "trainer": {"save_interval": 1, "micro_batch_size": 2, "optim": {"lr": 1.0e-3}},
        "synchronizer": {"sync_interval": 1},
        "stack": {
            "kafka": {"bootstrap_servers": stack.kafka.bootstrap_servers},
            "object_store": {"endpoint": stack.object_store.endpoint, "bucket": "rft-it"},
        },
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def rft_run(config: Path, *args: str) -> tuple[dict, str, str]:
    argv = [sys.executable, "-m", "rft.cli.main", "run", "--config", str(config), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # the trainer's summary line; the console metric sink may print step lines after it
    summary = [line for line in done.stdout.splitlines() if line.startswith('{"steps"')]
    assert len(summary) == 1, done.stdout[-3000:]
    return json.loads(summary[0]), done.stdout, done.stderr


def published(stack: StackSettings, topic: str) -> dict[tuple[int, int], Experience]:
    """The committed events of `topic` by (partition, offset)."""
    with RangeReader.open(stack.kafka, [topic]) as reader:
        return {
            (e.partition, e.offset): e.event
            for batch in reader.batches()
            for e in batch
            if isinstance(e.event, Experience)
        }


def announced(stack: StackSettings, topic: str) -> list[WeightVersion]:
    with RangeReader.open(stack.kafka, [topic]) as reader:
        return [
            e.event
            for batch in reader.batches()
            for e in batch
            if isinstance(e.event, WeightVersion)
        ]


def trained_offsets(versions: list[WeightVersion]) -> list[tuple[int, int]]:
    """Every (partition, offset) the versions' trained logs name, with repeats."""
    out = []
    for v in versions:
        assert v.trained_log is not None
        for runs in v.trained_log.trained:
            for first, last in runs.ranges:
                out += [(runs.partition, o) for o in range(first, last + 1)]
        for again in v.trained_log.retrained:
            out += [(again.partition, again.offset)] * (again.times - 1)
    return out


def test_an_sft_run_publishes_its_dataset_and_trains_exactly_it(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config = sft_run_config(stack, f"{unique}-sft", tmp_path)
    plan = RunPlan(load_config(config))

    first, out, _ = rft_run(config, "--override", "trainer.total_steps=1")
    assert f"{plan.experience_topic}: {ROWS * EPOCHS} experiences from {ROWS} rows" in out
    assert first["steps"] == 1 and first["experiences"] == BATCH

    events = published(stack, plan.experience_topic)
    assert sorted(e.experience_id for e in events.values()) == sorted(
        f"chats:{epoch}:{i}" for epoch in range(EPOCHS) for i in range(ROWS)
    )
    # both assistant turns trained, the user turn between them not
    for e in events.values():
        assert e.action_mask is not None and 0 < e.action_mask.sum() < len(e.action_mask)

    second, out, err = rft_run(config)
    assert "holds the dataset already; not published again" in out
    assert "resumed from checkpoint v1" in err
    assert second["experiences"] == ROWS * EPOCHS - BATCH
    assert second["steps"] == ROWS * EPOCHS // BATCH and second["stop_reason"] == "input end"
    assert second["left_untrained"] == 0
    assert len(published(stack, plan.experience_topic)) == ROWS * EPOCHS

    versions = announced(stack, plan.topics.weights)
    assert [v.version for v in versions] == [1, 2, 3]
    trained = trained_offsets(versions)
    assert sorted(trained) == sorted(events)  # every published event, each exactly once
    assert plan.checkpoint_store().latest_version() == 3


def test_an_sft_run_on_two_trainer_ranks_trains_exactly_its_dataset(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    """The sharded engine (fsdp2, two ranks over gloo) trains a dataset as the one-process
    engine does: rank 0 reads the published range, every row is trained once."""
    config = sft_run_config(stack, f"{unique}-sft-ranks", tmp_path)
    plan = RunPlan(load_config(config))
    summary, _, _ = rft_run(
        config, "--override", "trainer.trainer_type=fsdp2", "--override", "trainer.world_size=2"
    )
    assert summary["steps"] == ROWS * EPOCHS // BATCH and summary["stop_reason"] == "input end"
    assert summary["experiences"] == ROWS * EPOCHS and summary["left_untrained"] == 0
    events = published(stack, plan.experience_topic)
    versions = announced(stack, plan.topics.weights)
    assert [v.version for v in versions] == [1, 2, 3]
    assert sorted(trained_offsets(versions)) == sorted(events)


@pytest.mark.slow
def test_an_sft_run_killed_mid_dataset_resumes_and_trains_each_row_once(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    import signal
    import time

    config = sft_run_config(stack, f"{unique}-sft-kill", tmp_path, rows=24)  # 12 steps
    plan = RunPlan(load_config(config))
    store = plan.checkpoint_store()
    argv = [sys.executable, "-m", "rft.cli.main", "run", "--config", str(config)]
    victim = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while store.latest_version() < 2 and time.monotonic() < deadline:
            assert victim.poll() is None, "the run ended before it could be killed"
            time.sleep(0.1)
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    killed_at = store.latest_version()
    total_steps = 24 * EPOCHS // BATCH
    assert 2 <= killed_at < total_steps

    resumed, _, err = rft_run(config)
    assert f"resumed from checkpoint v{killed_at}" in err
    assert resumed["experiences"] == 24 * EPOCHS - BATCH * killed_at
    assert resumed["steps"] == total_steps and resumed["stop_reason"] == "input end"
    events = published(stack, plan.experience_topic)
    assert len(events) == 24 * EPOCHS  # published once
    by_version = {v.version: v for v in announced(stack, plan.topics.weights)}
    assert sorted(by_version) == list(range(1, total_steps + 1))
    # the chain of versions trained every published event exactly once
    assert sorted(trained_offsets(list(by_version.values()))) == sorted(events)
