"""The run checker on the real Kafka and MinIO: against a log with planted anomalies, against a
real run whose retention pruned most of its versions, and against a version pruned before
announcements carried its trained log.

The planted log is written by hand, as a faulty run would leave it: tasks published and
committed by the explorer group, experiences for all but one task (and two rollout groups for
another), a chain of two versions whose trained logs leave one experience out and train another
twice, a fork, an announcement with no manifest behind it, a version on the chain never
announced (v3), and experiences generated on a version never announced. Each planted anomaly
must be counted once, and nothing else; with replay on, the experience trained twice is judged
against the replay policy's use limit. (The clean counterpart is the fault
run in tests/faults/test_fault_run.py, whose every count must be 0.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from rft.buffer.replay_buffer import ReplaySettings
from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.ops.run_check import RunChecker, read_topic
from rft.consumers.run_plan import RunPlan
from rft.events.models import (
    Experience,
    ManifestEntry,
    Task,
    TopicOffset,
    TrainedLog,
    WeightVersion,
)
from rft.events.reader import EventReader
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.storage.checkpoint_store import CheckpointStore
from tests.integration.test_rft_loop import published_run, run_config

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def experience(task: Task, group: str, i: int, version: int, explorer_group: str) -> Experience:
    return Experience(
        experience_id=f"{group}:{i}",
        task_id=task.task_id,
        group_id=group,
        group_size=2,
        explorer_id="ex",
        model_version=version,
        prompt_ids=np.array([1, 2, 3], dtype=np.int32),
        response_ids=np.array([4, 5], dtype=np.int32),
        logprobs=np.array([-0.5, -0.25], dtype=np.float32),
        explorer_group=explorer_group,
    )


def version_dir(root: Path, version: int, trained: list, retrained: list, settled: list) -> Path:
    d = root / f"v{version}"
    (d / "trainer_state").mkdir(parents=True)
    (d / "model.safetensors").write_bytes(bytes([version]) * 64)
    state = {
        "sampler": {},
        "settled_ahead": [],
        "trained_log": {"trained": trained, "retrained": retrained, "settled": settled},
    }
    (d / "trainer_state" / "sampler.json").write_text(json.dumps(state))
    return d


def ranges(offsets: list[int]) -> list[list[int]]:
    return [[o, o] for o in sorted(offsets)]


def test_checker_counts_each_planted_anomaly(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config_path, cfg, plan = published_run(stack, unique, tmp_path, "fixed", 1)
    kafka = cfg.stack.kafka
    # the explorer group reads every task and commits: all tasks count as reached
    with EventReader.open(
        kafka, plan.explorer_group, [plan.topics.tasks], from_beginning=True
    ) as reader:
        got: list = []
        while True:
            batch = reader.poll(500, timeout_s=2.0)
            if not batch:
                break
            got += batch
        reader.commit()
    tasks = [e.event for e in got if isinstance(e.event, Task)]
    assert len(tasks) == 16
    unexplored, twice, *rest = tasks

    with EventWriter.open(kafka) as writer:
        for n, task in enumerate([twice, *rest]):
            for i in range(2):
                exp = experience(task, f"g{n}", i, 1, plan.explorer_group)
                writer.send(plan.experience_topic, exp, key=task.task_id)
        for i in range(2):  # a second rollout group of the same task
            exp = experience(twice, "again", i, 1, plan.explorer_group)
            writer.send(plan.experience_topic, exp, key=twice.task_id)
        for i in range(2, 4):  # more of one group, generated on v9, never announced
            exp = experience(rest[0], "g1", i, 9, plan.explorer_group)
            writer.send(plan.experience_topic, exp, key=rest[0].task_id)
        writer.flush()
    written, _ = read_topic(kafka, plan.experience_topic)
    positions = sorted((e.topic, e.partition, e.offset) for e in written)
    assert len(positions) == 2 * 15 + 2 + 2
    lost, retrained_one = positions[0], positions[1]
    by_tp: dict[tuple[str, int], list[int]] = {}
    for t, p, o in positions:
        if (t, p, o) != lost:
            by_tp.setdefault((t, p), []).append(o)
    split = {tp: (offs[: len(offs) // 2], offs[len(offs) // 2 :]) for tp, offs in by_tp.items()}
    ends: dict[tuple[str, int], int] = {}
    for t, p, o in positions:
        ends[(t, p)] = max(ends.get((t, p), 0), o + 1)

    store: CheckpointStore = plan.checkpoint_store()
    store.store.ensure_bucket()
    first = [[t, p, ranges(a)] for (t, p), (a, _) in sorted(split.items())]
    second = [[t, p, ranges(b)] for (t, p), (_, b) in sorted(split.items())]
    extra = {"sampler_state": "trainer_state/sampler.json"}
    offsets = [(t, p, o) for (t, p), o in sorted(ends.items())]
    m1 = store.write(
        1, 1, version_dir(tmp_path, 1, first, [], first), offsets, parent_version=0, extra=extra
    )
    store.write(
        3,
        3,
        version_dir(tmp_path, 3, second, [[*retrained_one, 2]], second),
        offsets,
        parent_version=1,
        extra=extra,
    )
    # a fork: a second writer's v2 from the base model
    store.write(2, 2, version_dir(tmp_path, 2, [], [], []), offsets, parent_version=0, extra=extra)

    def announce(version: int, entries: tuple[ManifestEntry, ...]) -> WeightVersion:
        return WeightVersion(
            version=version,
            train_step=version,
            uri=store.uri(version),
            manifest=entries,
            consumed_offsets=tuple(TopicOffset(t, p, o) for t, p, o in offsets),
            parent_version=version - 1,
        )

    with EventWriter.open(kafka) as writer:
        entries = tuple(ManifestEntry(f.name, f.size, f.sha256) for f in m1.files)
        writer.send(plan.topics.weights, announce(1, entries), key=b"weights")
        writer.send(plan.topics.weights, announce(4, entries), key=b"weights")  # no manifest
        writer.flush()

    checker = RunChecker(kafka, plan.topics, plan.experience_topic, plan.explorer_group, store)
    report = checker.check()
    print("\n".join(report.table()))
    # retrained_one sits in the first half of its partition (v1) and is trained again by v3
    assert report.anomalies == {
        "experiences lost": 1,
        "experiences trained twice": 1,
        "tasks never explored": 1,
        "tasks explored twice": 1,
        "versions announced without a verified manifest": 1,
        "versions never announced": 1,
        "versions off the chain": 1,
        "corrupt weights loaded": 2,
    }
    assert f"{lost[0]}[{lost[1]}]@{lost[2]}" in report.examples["experiences lost"]
    assert unexplored.task_id in report.examples["tasks never explored"][0]
    assert report.facts["experiences committed"] == len(positions)
    assert report.facts["experiences trained"] == len(positions) - 1
    assert report.facts["versions on the chain"] == 2

    # with replay on, twice is judged against the policy: a group may be used twice here...
    def with_replay(limit: int) -> RunChecker:
        args = {"use_count_limit": limit}
        replay = ReplaySettings(100, 0.0, "linear_decay_use_count_control_randomization", args)
        return RunChecker(
            kafka, plan.topics, plan.experience_topic, plan.explorer_group, store, replay=replay
        )

    twice_ok = with_replay(2).check()
    assert twice_ok.anomalies["experiences trained twice"] == 0
    assert twice_ok.facts["experiences trained again by replay (within its limits)"] == 1
    # ...but only once here
    once = with_replay(1).check()
    assert once.anomalies["experiences trained twice"] == 1
    assert "more than the replay policy" in once.examples["experiences trained twice"][0]
    assert once.facts["experiences trained again by replay (within its limits)"] == 0

    # the verb prints the same table and exits 4 on anomalies
    done = rft("check", config_path)
    assert done.returncode == 4, done.stderr[-2000:]
    assert re.search(r"experiences lost +1\n", done.stdout), done.stdout
    assert "result: ANOMALIES FOUND" in done.stdout


def rft(verb: str, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "rft.cli.main", verb, "--config", str(config), *args]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=400)


def rft_check(config: Path) -> tuple[int, dict]:
    done = rft("check", config, "--json")
    assert done.returncode in (0, 4), done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


def test_a_run_that_retention_pruned_checks_clean(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    """`rft run` with max_checkpoints_to_keep 2 over 6 versions: the store keeps only the newest,
    the announcements prove the rest of the chain and every experience trained."""
    raw = run_config(stack, unique, tmp_path)
    steps, keep = 6, 2
    raw["buffer"]["total_steps"] = steps
    raw["trainer"]["max_checkpoints_to_keep"] = keep
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(raw))
    done = rft("run", config)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    plan = RunPlan(load_config(config))
    store = plan.checkpoint_store()
    stored = store.list_versions()
    # live explorers may hold a version back for a while, but the newest `keep` always stay
    assert keep <= len(stored) < steps and stored[-1] == steps, stored

    code, report = rft_check(config)
    assert code == 0 and report["ok"], report
    facts = report["facts"]
    assert facts["versions announced"] == steps
    assert facts["versions on the chain"] == steps
    assert facts["versions in the store"] == len(stored)
    assert facts["versions pruned by retention"] == steps - len(stored)
    grouped = raw["buffer"]["batch_size"] * raw["algorithm"]["repeat_times"]
    assert facts["experiences committed"] == steps * grouped
    assert facts["experiences trained"] == facts["experiences committed"]
    assert facts["experiences unprovable (their version's trained log is gone)"] == 0
    assert facts["experiences not reached by the trainer"] == 0

    # a manifest retention never removes (one of the newest `keep`) goes missing: that version
    # is an anomaly (and so is every experience generated on it), while its announcement still
    # proves what it trained
    gone = stored[-2]
    store.store.delete(store.version_prefix(gone) + "manifest.json")
    written, _ = read_topic(plan.cfg.stack.kafka, plan.experience_topic)
    on_gone = sum(1 for e in written if e.event.model_version == gone)
    code, report = rft_check(config)
    assert code == 4
    assert {k: v for k, v in report["anomalies"].items() if v} == {
        "versions announced without a verified manifest": 1,
        **({"corrupt weights loaded": on_gone} if on_gone else {}),
    }, report
    assert (
        f"v{gone}: no manifest"
        in report["examples"]["versions announced without a verified manifest"][0]
    )
    assert report["facts"]["experiences trained"] == facts["experiences committed"]
    assert report["facts"]["versions pruned by retention"] == steps - len(stored)


def test_versions_pruned_before_announcements_carried_a_log(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    """v1 was announced without a trained log (schema v1) and pruned; v2 is stored and says what
    it trained. With retention (keep 1) v1 is pruned and what it consumed is unprovable, not
    lost; without retention its missing manifest is an anomaly."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(run_config(stack, unique, tmp_path)))
    plan = RunPlan(load_config(config))
    kafka = plan.cfg.stack.kafka
    ensure_topics(kafka, plan.topics)
    with EventWriter.open(kafka) as writer:
        for half in range(2):
            for g in range(2):
                for i in range(2):
                    task = Task(f"t{half}{g}", "ts", 0, 2 * half + g, {}, {}, "w", "r", {}, 2)
                    exp = experience(task, f"g{half}{g}", i, 0, plan.explorer_group)
                    writer.send(plan.experience_topic, exp, key=task.task_id)
            writer.flush()
    written, _ = read_topic(kafka, plan.experience_topic)
    first = {(e.topic, e.partition, e.offset) for e in written if e.event.group_id[1] == "0"}
    second = {(e.topic, e.partition, e.offset) for e in written} - first
    ends: dict[tuple[str, int], int] = {}
    for t, p, o in first:  # v1 consumed the first half: each partition's first offsets
        ends[(t, p)] = max(ends.get((t, p), 0), o + 1)
    v1_offsets = [TopicOffset(t, p, o) for (t, p), o in sorted(ends.items())]
    for t, p, o in second:
        ends[(t, p)] = max(ends.get((t, p), 0), o + 1)
    by_tp: dict[tuple[str, int], list[int]] = {}
    for t, p, o in second:
        by_tp.setdefault((t, p), []).append(o)
    v2_trained = [[t, p, ranges(offs)] for (t, p), offs in sorted(by_tp.items())]

    store = plan.checkpoint_store()
    store.store.ensure_bucket()
    m2 = store.write(
        2,
        2,
        version_dir(tmp_path, 2, v2_trained, [], v2_trained),
        [(t, p, o) for (t, p), o in sorted(ends.items())],
        parent_version=1,
        extra={"sampler_state": "trainer_state/sampler.json"},
    )
    v2 = WeightVersion(
        2,
        2,
        store.uri(2),
        tuple(ManifestEntry(f.name, f.size, f.sha256) for f in m2.files),
        tuple(TopicOffset(o.topic, o.partition, o.offset) for o in m2.consumed_offsets),
        parent_version=1,
        trained_log=TrainedLog.of_lists(trained=v2_trained, settled=v2_trained),
    )
    v1 = WeightVersion(1, 1, store.uri(1), (), tuple(v1_offsets), parent_version=0)
    with EventWriter.open(kafka) as writer:
        for event in (v1, v2):
            writer.send(plan.topics.weights, event, key=b"weights")
        writer.flush()

    def check(keep: int | None):
        return RunChecker(
            kafka,
            plan.topics,
            plan.experience_topic,
            plan.explorer_group,
            store,
            keep_checkpoints=keep,
        ).check()

    pruned = check(1)
    assert pruned.ok, pruned.table()
    assert pruned.facts["versions pruned by retention"] == 1
    assert pruned.facts["versions on the chain"] == 2
    assert pruned.facts["experiences trained"] == len(second)
    assert pruned.facts["experiences unprovable (their version's trained log is gone)"] == len(
        first
    )
    assert any("v1" in n and "without a trained log" in n for n in pruned.notes)

    kept_all = check(None)
    assert {k: v for k, v in kept_all.anomalies.items() if v} == {
        "versions announced without a verified manifest": 1
    }
    assert kept_all.facts["versions pruned by retention"] == 0
