"""Replay survives a killed trainer (`replay_buffer.enable`, the real Kafka and MinIO, tiny model).

The explorer writes every experience first; the trainer replays each rollout group twice
(`linear_decay_use_count_control_randomization`, use_count_limit 2, cooldown 0: every group once,
then every group again) and is killed (SIGKILL) in the second pass. The newest weight version's
sampler state names the held groups by their log positions: they must be real experiences of the
topic with their use counts. A restarted trainer (which gets the partitions once the broker's
session timeout has expelled the killed one) continues from it, and over both processes each
experience is trained exactly twice: the per-step use-count histograms count 64 first uses and
64 second uses of the topic's 64 experiences, none a third, none a first use again.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rft.config.connections import StackSettings
from rft.consumers.trainer.checkpoint import TrainerCheckpointer
from rft.events.models import Experience, Metric
from tests.integration.test_rft_loop import published_run, read_all
from tests.integration.test_trainer_resume import run_verb
from tests.topic_log import read_topic

pytestmark = pytest.mark.integration

EXPLORER_STEPS = 8  # x 2 tasks x 4 rollouts = 64 experiences, 16 groups
TRAIN_STEPS = 16  # batches of 8: every group twice
REPLAY = "buffer.trainer_input.experience_buffer.replay_buffer"
TRAIN = [
    f"trainer.total_steps={TRAIN_STEPS}",
    f"{REPLAY}.enable=true",
    f"{REPLAY}.reuse_cooldown_time=0",
    f"{REPLAY}.priority_fn=linear_decay_use_count_control_randomization",
    f"{REPLAY}.priority_fn_args={{decay: 2.0, use_count_limit: 2, sigma: 0.0}}",
    "buffer.trainer_input.experience_buffer.max_read_timeout=120",
]


def experience_log(cfg, topic: str, group: str) -> dict[tuple[str, int, int], Experience]:
    """Every experience of the topic by (topic, partition, offset)."""
    return {
        (env.topic, env.partition, env.offset): env.event
        for env in read_topic(cfg.stack.kafka, topic, group)
        if isinstance(env.event, Experience)
    }


@pytest.mark.faults  # a kill and a restart: in `make test-faults`, out of the default suite's 30 min
@pytest.mark.slow
def test_replay_use_counts_continue_after_the_trainer_is_killed(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config_path, cfg, plan = published_run(stack, unique, tmp_path, "trainer_driven", 1)
    run_verb("explore", config_path, f"buffer.total_steps={EXPLORER_STEPS}")
    log = experience_log(cfg, plan.experience_topic, unique + "-log")
    assert len(log) == 64

    store = plan.checkpoint_store()
    argv = [sys.executable, "-m", "rft.cli.main", "train", "--config", str(config_path)]
    for item in TRAIN:
        argv += ["--override", item]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    try:
        # kill it in the second pass, when versions > 8 hold groups used once and retired ones
        while store.latest_version() < 9:
            assert first.poll() is None, (first.stdout.read() if first.stdout else "")[-3000:]
            assert time.monotonic() < deadline, "the first trainer never reached version 9"
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
    finally:
        first.kill()
        first.wait(timeout=60)
    killed_at = store.latest_version()
    assert 9 <= killed_at < TRAIN_STEPS, killed_at

    checkpoints = TrainerCheckpointer(store, save_interval=100)
    saved = checkpoints.read_sampler_state(killed_at)
    assert saved is not None
    held = saved["sampler"]["pool"]["groups"]
    # the use counts name real experiences of the log: the members of each held group are the
    # topic's events at those positions, of that group, all of it
    assert held, "the kill left no group in the replay buffer"
    for group in held:
        members = [log[(t, p, o)] for t, p, o in group["members"]]
        assert {m.group_id for m in members} == {group["group_id"]}
        assert len(members) == members[0].group_size
        assert group["use_count"] == 1  # all were trained once; the second pass retires them
    assert len(held) == 16 - 2 * (killed_at - 8)  # each step of the second pass retired two
    counters = saved["sampler"]["counters"]
    assert counters["learner_rows"] == killed_at * 8
    assert counters["replayed_rows"] == (killed_at - 8) * 8

    out, err = run_verb("train", config_path, *TRAIN)
    assert f"resumed from checkpoint v{killed_at} (train step {killed_at}" in err
    assert json.loads(out.strip().splitlines()[-1])["steps"] == TRAIN_STEPS, err[-3000:]

    final = checkpoints.read_sampler_state(TRAIN_STEPS)
    assert final is not None
    assert final["sampler"]["pool"]["groups"] == []  # every group used twice and retired
    done = final["sampler"]["counters"]
    assert (done["learner_rows"], done["replayed_rows"], done["retired"]) == (128, 64, 64)
    # every experience of the topic is settled: the resume point is past the last one
    ends = Counter()
    for t, p, o in log:
        ends[(t, p)] = max(ends[(t, p)], o + 1)
    consumed = {
        (o.topic, o.partition): o.offset for o in store.read_manifest(TRAIN_STEPS).consumed_offsets
    }
    assert all(consumed[tp] >= end for tp, end in ends.items())

    # the step metrics of both processes (a step redone after the kill counts once, as redone)
    by_step: dict[int, Metric] = {}
    for m in read_all(cfg, plan.topics.metrics, unique + "-m"):
        if isinstance(m, Metric) and m.component == "trainer" and "use_count/1" in m.values:
            by_step[m.step] = m
    assert sorted(by_step) == list(range(1, TRAIN_STEPS + 1))
    uses = Counter()
    for m in by_step.values():
        for bucket in ("1", "2", "3", "4+"):
            uses[bucket] += int(m.values[f"use_count/{bucket}"])
    assert uses == Counter({"1": 64, "2": 64, "3": 0, "4+": 0})
    assert [by_step[s].values["replayed_fraction"] for s in range(1, 17)] == [0.0] * 8 + [1.0] * 8


def test_demonstrations_from_a_topic_continue_where_they_stopped(
    stack: StackSettings, unique: str
) -> None:
    """`auxiliary_buffers.<name>.storage_type: kafka`: demonstrations are the Experience events
    of the topic at `path`, in log order, and a restored source goes on with the next one."""
    from rft.buffer.expert_source import EXPERT_SOURCES, ExpertContext
    from rft.config.schema import AuxiliaryBufferConfig
    from rft.engines.models import build_byte_tokenizer
    from rft.events.topics import ensure_topics
    from rft.events.writer import EventWriter
    from tests.unit.experience_log import experience

    kafka = dataclasses.replace(stack.kafka, partitions=1)
    topic = f"{unique}.curated"
    ensure_topics(kafka, [topic])
    with EventWriter.open(kafka) as writer:
        for i in range(5):
            writer.send(topic, experience(f"c{i}", 1, 0, 3, 1.0), key=f"c{i}".encode())
        writer.flush()
    context = ExpertContext(build_byte_tokenizer(), 64, 2, kafka=kafka, group_prefix=unique)
    buffer = AuxiliaryBufferConfig(path=topic, name="curated", storage_type="kafka")
    source = EXPERT_SOURCES.get(buffer.storage_type)(buffer, context)
    got = None
    for _ in range(30):  # the first polls may come before the group's assignment
        got = source.take(3)
        if got is not None:
            break
    assert got is not None
    assert [e.experience_id for e in got] == [f"curated:0:{o}" for o in range(3)]
    assert all(len(e.response_ids) == 2 for e in got)  # max_response_tokens
    saved = source.state()
    source.close()
    again = EXPERT_SOURCES.get("queue")(buffer, context)
    again.restore(saved)
    rest = None
    for _ in range(30):
        rest = again.take(2)
        if rest is not None:
            break
    again.close()
    assert rest is not None and [e.experience_id for e in rest] == ["curated:0:3", "curated:0:4"]
