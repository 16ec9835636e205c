"""`rft train --from-topic`: offline training from an experience topic that another run wrote,
against the real Kafka and MinIO with the tiny model.

The source topic is written here as explorers write it (one transaction per step). The retrain
runs in a run of its own, is stopped after one step, resumes from its checkpoint and trains the
rest of the range (none twice: the counts add up to the log's), stops at the range's end even
after the topic grew, and publishes nothing into the source run; one killed with SIGKILL mid-range
resumes from its newest version and trains exactly the rest. Filters: reward-filtered SFT
(raft) trains exactly the kept experiences; a group algorithm refuses a reward filter.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.replay.topic_range import RangeReader
from rft.consumers.run_plan import RunPlan
from rft.events.models import Experience, WeightVersion
from rft.events.topics import TopicNames, ensure_topics
from rft.events.writer import EventWriter
from tests.integration.test_rft_loop import run_config

pytestmark = pytest.mark.integration

REPEAT = 4  # rollouts per task (the config's repeat_times)
BATCH = 2  # tasks per batch: train_batch_size 8


def logged(i: int, k: int, version: int) -> Experience:
    """Rollout k of task i: rollouts 0 and 1 earn reward 1, the others 0."""
    rng = np.random.default_rng(100 * i + k)
    n = int(rng.integers(2, 8))
    return Experience(
        experience_id=f"t{i}:{k}",
        task_id=f"t{i}",
        group_id=f"t{i}:g",
        group_size=REPEAT,
        explorer_id="explorer-0",
        explorer_group="src.explorer",
        model_version=version,
        prompt_ids=rng.integers(3, 20, size=5, dtype=np.int32),
        response_ids=rng.integers(3, 20, size=n, dtype=np.int32),
        logprobs=-rng.random(n, dtype=np.float32),
        reward=1.0 if k < 2 else 0.0,
    )


def write_steps(stack: StackSettings, topic: str, tasks: range, tx_id: str) -> None:
    """Two tasks' groups per transaction, model version = step index, as an explorer writes."""
    with EventWriter.open(stack.kafka, transactional_id=tx_id) as tx:
        for first in range(tasks.start, tasks.stop, BATCH):
            tx.begin()
            for i in range(first, min(first + BATCH, tasks.stop)):
                for k in range(REPEAT):
                    tx.send(topic, logged(i, k, i // BATCH), key=f"t{i}")
            tx.commit()


def retrain_config(stack: StackSettings, name: str, tmp: Path, algorithm: str) -> Path:
    raw = run_config(stack, name, tmp)
    raw["algorithm"]["algorithm_type"] = algorithm
    raw["algorithm"]["repeat_times"] = REPEAT
    raw["buffer"]["batch_size"] = BATCH
    raw["buffer"]["trainer_input"] = {"max_staleness": 0}  # set aside offline, with a warning
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def train(config: Path, *args: str, expect_ok: bool = True) -> tuple[dict, str]:
    argv = [sys.executable, "-m", "rft.cli.main", "train", "--config", str(config), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if not expect_ok:
        assert done.returncode != 0
        return {}, done.stderr
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def versions_on(stack: StackSettings, topic: str) -> list[int]:
    with RangeReader.open(stack.kafka, [topic]) as reader:
        return [
            e.event.version
            for batch in reader.batches()
            for e in batch
            if isinstance(e.event, WeightVersion)
        ]


def test_retrain_resumes_without_training_twice_and_stops_at_range_end(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    source = TopicNames.for_run("rft-it", f"{unique}-online")
    ensure_topics(stack.kafka, source)
    write_steps(stack, source.experiences, range(6), f"tx-{unique}")  # 24 experiences
    logged_count = 6 * REPEAT

    config = retrain_config(stack, f"{unique}-retrain", tmp_path, "grpo")
    plan = RunPlan(load_config(config))
    from_topic = ("--from-topic", source.experiences)

    first, first_err = train(config, *from_topic, "--override", "trainer.total_steps=1")
    assert first["steps"] == 1 and first["experiences"] == 8
    assert first["stop_reason"] == "total_steps (1)" and "stopped by total_steps (1)" in first_err
    assert "max_staleness 0 is not applied offline" in first_err

    second, second_err = train(config, *from_topic)
    assert "resumed from checkpoint v1" in second_err
    # only the rest: the two runs' trained experiences add up to the log's, none twice
    assert second["experiences"] == logged_count - 8
    assert second["steps"] == 3 and second["input_ended"] and second["left_untrained"] == 0
    assert second["stop_reason"] == "input end"
    line = (
        f"rft train --from-topic {source.experiences}: range read to its end, stopped by input end"
    )
    assert line in second_err

    store = plan.checkpoint_store()
    manifest = store.read_manifest(3)
    with RangeReader.open(stack.kafka, [source.experiences]) as reader:
        last = {}
        for batch in reader.batches():
            for e in batch:
                last[(e.topic, e.partition)] = e.offset
    consumed = {(o.topic, o.partition): o.offset for o in manifest.consumed_offsets}
    assert all(consumed[tp] > offset for tp, offset in last.items())  # every experience settled

    # the source grows; the retrain's range was fixed when it began: nothing more to train
    write_steps(stack, source.experiences, range(6, 8), f"tx-{unique}")
    third, third_err = train(config, *from_topic)
    assert third["steps"] == 3 and third["experiences"] == 0
    assert third["input_ended"] and third["stop_reason"] == "input end"

    # versions went to the retrain's own run; the source run's weights topic saw none
    assert versions_on(stack, plan.topics.weights) == [1, 2, 3]
    assert versions_on(stack, source.weights) == []


def test_reward_filtered_sft_trains_exactly_the_kept_experiences(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    source = TopicNames.for_run("rft-it", f"{unique}-online")
    ensure_topics(stack.kafka, source)
    write_steps(stack, source.experiences, range(6), f"tx-{unique}")
    kept = [logged(i, k, i // BATCH) for i in range(6) for k in range(REPEAT)]
    kept = [e for e in kept if e.reward >= 1.0 and e.model_version <= 1]  # 4 tasks x 2 = 8

    grpo = retrain_config(stack, f"{unique}-grpo", tmp_path, "grpo")
    _, refused = train(
        grpo, "--from-topic", source.experiences, "--min-reward", "1", expect_ok=False
    )
    assert "--min-reward/--max-reward: algorithm 'grpo'" in refused

    raft = retrain_config(stack, f"{unique}-sft", tmp_path, "raft")
    summary, _ = train(
        raft, "--from-topic", source.experiences, "--min-reward", "1", "--max-version", "1"
    )
    assert summary["experiences"] == len(kept) == 8
    assert summary["steps"] == 1 and summary["filtered"] == 6 * REPEAT - len(kept)
    assert summary["stop_reason"] == "input end" and summary["left_untrained"] == 0


# a SIGKILL fault run (24 s): make test-all and make test-faults run it
@pytest.mark.slow
@pytest.mark.faults
def test_a_retrain_killed_mid_range_resumes_from_its_newest_version(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    source = TopicNames.for_run("rft-it", f"{unique}-online")
    ensure_topics(stack.kafka, source)
    tasks = 24  # 12 steps of 8 experiences
    write_steps(stack, source.experiences, range(tasks), f"tx-{unique}")
    config = retrain_config(stack, f"{unique}-retrain", tmp_path, "grpo")
    store = RunPlan(load_config(config)).checkpoint_store()
    argv = [sys.executable, "-m", "rft.cli.main", "train", "--config", str(config)]
    argv += ["--from-topic", source.experiences, "--override", "buffer.total_steps=100"]
    victim = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while store.latest_version() < 2 and time.monotonic() < deadline:
            assert victim.poll() is None, "the retrain ended before it could be killed"
            time.sleep(0.1)
    finally:
        victim.send_signal(signal.SIGKILL)  # no chance to publish what it trained since
        victim.wait()
    killed_at = store.latest_version()
    assert 2 <= killed_at < tasks // BATCH

    resumed, err = train(
        config, "--from-topic", source.experiences, "--override", "buffer.total_steps=100"
    )
    assert f"resumed from checkpoint v{killed_at}" in err
    # every batch holds 8 experiences: the versions before the kill trained 8 * killed_at, the
    # resume trains exactly the rest (steps after the newest version are trained again: their
    # weights died with the process)
    assert resumed["experiences"] == tasks * REPEAT - 8 * killed_at
    assert resumed["steps"] == tasks // BATCH and resumed["stop_reason"] == "input end"
