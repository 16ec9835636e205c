"""`algorithm_type: dpo` end to end on the real Kafka and MinIO with the tiny model.

A preference dataset (prompt / chosen / rejected rows) is published to the run's experience topic
as groups of two and trained with no explorer; a run stopped after one step resumes and trains
exactly the rest, against the same reference (the base weights: the first step's policy equals
the reference, so its margin is 0; the first step after the resume is not); another run retrains
the topic with `rft train --from-topic`. Pairs built by `rft replay pairs` from a topic of rollout
groups are trained the same way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.replay.topic_range import RangeReader
from rft.consumers.run_plan import RunPlan
from rft.events.models import Experience, Metric
from rft.events.writer import EventWriter
from rft.producers.experience_import import prepare_target_topic
from tests.integration.test_sft_run import announced, published, rft_run, trained_offsets

pytestmark = pytest.mark.integration

PAIRS, EPOCHS, BATCH = 4, 2, 4  # 16 events, 8 pairs: 4 steps of 2 pairs


def dpo_run_config(
    stack: StackSettings, name: str, tmp: Path, data: Path | None = None, **algorithm: object
) -> Path:
    buffer: dict = {"train_batch_size": BATCH, "total_epochs": EPOCHS}
    if data is not None:
        buffer["trainer_input"] = {
            "experience_buffer": {
                "name": "prefs",
                "storage_type": "file",
                "path": str(data),
                "format": {"prompt_key": "question", "chosen_key": "good", "rejected_key": "bad"},
            }
        }
    raw = {
        "project": "rft-it",
        "name": name,
        "mode": "train",
        "checkpoint_root_dir": str(tmp / "ckpt"),
        "algorithm": {"algorithm_type": "dpo", **algorithm},
        "model": {"model_path": "tiny", "max_prompt_tokens": 64, "max_response_tokens": 32},
        "buffer": buffer,
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


def preference_rows(tmp: Path) -> Path:
    data = tmp / "prefs.jsonl"
    rows = [
        {"question": f"What is {i} + {i}?", "good": f"It is {2 * i}.", "bad": f"Maybe {i}."}
        for i in range(PAIRS)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def trainer_metrics(stack: StackSettings, topic: str) -> dict[int, dict[str, float]]:
    """The trainer's metric values by step (the last record of a step wins)."""
    out: dict[int, dict[str, float]] = {}
    with RangeReader.open(stack.kafka, [topic]) as reader:
        for batch in reader.batches():
            for env in batch:
                m = env.event
                if isinstance(m, Metric) and m.component.startswith("trainer"):
                    out.setdefault(m.step, {}).update(m.values)
    return out


def margin(values: dict[str, float]) -> float:
    [name] = [k for k in values if k.endswith("rewards/margins")]
    return values[name]


def rft_train_from(config: Path, topic: str) -> dict:
    argv = [sys.executable, "-m", "rft.cli.main", "train", "--config", str(config)]
    done = subprocess.run(
        [*argv, "--from-topic", topic], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [line] = [x for x in done.stdout.splitlines() if x.startswith('{"steps"')]
    return json.loads(line)


def test_a_dpo_run_trains_its_pairs_resumes_and_is_retrained(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config = dpo_run_config(stack, f"{unique}-dpo", tmp_path, preference_rows(tmp_path))
    plan = RunPlan(load_config(config))

    first, out, _ = rft_run(config, "--override", "trainer.total_steps=1")
    assert f"{plan.experience_topic}: {2 * PAIRS * EPOCHS} experiences from {PAIRS} rows" in out
    assert first["steps"] == 1 and first["experiences"] == BATCH

    events = published(stack, plan.experience_topic)
    groups: dict[str, list[Experience]] = {}
    for _, e in sorted(events.items()):
        groups.setdefault(e.group_id, []).append(e)
    assert len(groups) == PAIRS * EPOCHS
    for members in groups.values():
        assert [m.reward for m in members] == [1.0, 0.0]  # chosen, then rejected
        np.testing.assert_array_equal(members[0].prompt_ids, members[1].prompt_ids)

    second, out, err = rft_run(config)
    assert "resumed from checkpoint v1" in err
    assert second["experiences"] == 2 * PAIRS * EPOCHS - BATCH
    assert second["stop_reason"] == "input end" and second["left_untrained"] == 0

    versions = announced(stack, plan.topics.weights)
    assert [v.version for v in versions] == [1, 2, 3, 4]
    assert sorted(trained_offsets(versions)) == sorted(events)  # each pair once

    by_step = trainer_metrics(stack, plan.topics.metrics)
    # step 1: the policy is the reference (the base weights), so every margin is 0; after the
    # resume the reference is still the base model, not the v1 weights the policy resumed from
    assert margin(by_step[1]) == 0.0
    assert margin(by_step[2]) != 0.0

    retrain = dpo_run_config(stack, f"{unique}-dpo-again", tmp_path)  # no dataset file
    again = rft_train_from(retrain, plan.experience_topic)
    assert again["experiences"] == 2 * PAIRS * EPOCHS and again["left_untrained"] == 0


def test_pairs_built_from_rollout_groups_train_a_dpo_run(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config = dpo_run_config(stack, f"{unique}-dpo-pairs", tmp_path)
    plan = RunPlan(load_config(config, trains_offline=True))
    source = f"rft-it.{unique}-rollouts.experiences"
    prepare_target_topic(stack.kafka, source, append=False)
    rewards = {"t0": [0.0, 1.0, 0.5, 0.0], "t1": [1.0, 1.0, 1.0, 1.0], "t2": [0.2, 0.0, 0.9, 0.1]}
    rewards |= {"t3": [1.0, 0.0, 0.0, 0.0], "t4": [0.0, 0.0, 0.0, 1.0]}
    with EventWriter.open(stack.kafka) as writer:
        for task, values in rewards.items():
            for i, r in enumerate(values):
                exp = Experience(
                    experience_id=f"{task}/{i}",
                    task_id=task,
                    group_id=task,
                    group_size=len(values),
                    explorer_id="e0",
                    model_version=0,
                    prompt_ids=np.array([5, 6, 7, 8], dtype=np.int32),
                    response_ids=np.array([20 + i, 30, 40 + i], dtype=np.int32),
                    logprobs=np.full(3, -1.0, dtype=np.float32),
                    action_mask=np.ones(3, dtype=bool),
                    reward=r,
                )
                writer.send(source, exp, key=task)
        # a group whose last member never came: reported, not paired
        writer.send(
            source,
            Experience(
                experience_id="t5/0",
                task_id="t5",
                group_id="t5",
                group_size=2,
                explorer_id="e0",
                model_version=0,
                prompt_ids=np.array([5], dtype=np.int32),
                response_ids=np.array([9], dtype=np.int32),
                logprobs=np.zeros(1, dtype=np.float32),
                reward=1.0,
            ),
            key="t5",
        )
    target = f"rft-it.{unique}-pairs.experiences"
    argv = [sys.executable, "-m", "rft.cli.main", "replay", "pairs", source, "-o", target]
    argv += ["--bootstrap", stack.kafka.bootstrap_servers]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "4 pair(s) written" in done.stderr and "1 group(s) without a reward spread" in done.stderr
    )
    assert "1 incomplete group(s)" in done.stderr

    pairs: dict[str, list[Experience]] = {}
    for _, e in sorted(published(stack, target).items()):
        pairs.setdefault(e.group_id, []).append(e)
    chosen_rejected = {g: [e.experience_id for e in m] for g, m in pairs.items()}
    assert chosen_rejected == {
        "pair:t0": ["t0/1", "t0/0"],
        "pair:t2": ["t2/2", "t2/1"],
        "pair:t3": ["t3/0", "t3/1"],
        "pair:t4": ["t4/3", "t4/0"],
    }

    trained = rft_train_from(config, target)
    assert trained["experiences"] == 8 and trained["steps"] == 2
    assert trained["left_untrained"] == 0
    assert [v.version for v in announced(stack, plan.topics.weights)] == [1, 2]
