"""Retention against the real Kafka and MinIO: `trainer.max_checkpoints_to_keep` prunes old
versions but never one a live explorer reports loaded; `rft gc` removes orphaned version
directories, and the stray files a killed upload left inside a committed version, older than its
TTL, and nothing else."""

from __future__ import annotations

import contextlib
import functools
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.run_plan import RunPlan
from rft.consumers.trainer.versions_in_use import versions_in_use
from rft.events.models import Experience
from rft.events.reader import EventReader
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.storage.checkpoint_gc import find_strays
from tests.integration.test_rft_loop import run_config

pytestmark = pytest.mark.integration


def experience(explorer_id: str, version: int, i: int) -> Experience:
    return Experience(
        experience_id=f"{explorer_id}/{i}",
        task_id=f"task-{i}",
        group_id=f"task-{i}",
        group_size=1,
        explorer_id=explorer_id,
        model_version=version,
        prompt_ids=np.array([1, 2], dtype=np.int32),
        response_ids=np.array([3, 4], dtype=np.int32),
        logprobs=np.zeros(2, dtype=np.float32),
    )


@contextlib.contextmanager
def live_explorer(plan: RunPlan, explorer_id: str):
    """A member of the explorer's weights group, as a running explorer's follower is."""
    group = f"{plan.run_id}.weights.{explorer_id}"
    with EventReader.open(plan.cfg.stack.kafka, group, [plan.topics.weights]) as reader:
        deadline = time.monotonic() + 60
        while not reader.assignment():
            assert time.monotonic() < deadline, f"{group} got no assignment in 60s"
            reader.poll(10, timeout_s=0.5)
        yield


def test_prune_keeps_what_live_explorers_hold(stack: StackSettings, unique: str, tmp_path: Path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(run_config(stack, unique, tmp_path)))
    cfg = load_config(config)
    plan = RunPlan(cfg)
    kafka = cfg.stack.kafka
    ensure_topics(kafka, plan.topics)
    with EventWriter.open(kafka) as writer:
        # e1 sampled with v2, then v3 (it holds v3 now); e2 holds v1 but is gone
        for i, (who, version) in enumerate([("e1", 2), ("e2", 1), ("e1", 3)]):
            writer.send(plan.experience_topic, experience(who, version, i), key=f"task-{i}")
            writer.flush()
            time.sleep(0.01)  # distinct created_at: "newest" is well defined
    in_use = functools.partial(versions_in_use, kafka, plan.topics, plan.experience_topic)

    store = plan.checkpoint_store()
    src = tmp_path / "weights"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"w" * 100)
    for version in (1, 2, 3, 4, 5):
        store.write(version, version, src)

    with live_explorer(plan, "e1"):
        assert in_use() == {3}
        with live_explorer(plan, "e3"):  # live, but has written nothing: its version unknown
            assert in_use() is None
            assert store.prune(1, in_use) == []
        # max_checkpoints_to_keep: 1 with e1 holding v3: v1, v2, v4 go; v3 and v5 stay
        assert store.prune(1, in_use) == [1, 2, 4]
    assert store.list_versions() == [3, 5]
    assert in_use() == set()  # e1 left its group: no longer live
    assert store.prune(1, in_use) == [3]


def rft_gc(config: Path, *args: str) -> str:
    argv = [sys.executable, "-m", "rft.cli.main", "gc", "--config", str(config), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_rft_gc_removes_old_orphans_only(stack: StackSettings, unique: str, tmp_path: Path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(run_config(stack, unique, tmp_path)))
    store = RunPlan(load_config(config)).checkpoint_store()
    src = tmp_path / "weights"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"w" * 100)
    store.write(1, 1, src)
    store.store.put_bytes(store.version_prefix(2) + "model.safetensors", b"half an upload")
    orphan_uri = store.uri(2)

    out = rft_gc(config, "--ttl", "1h")
    assert f"kept {orphan_uri}: 1 file(s)" in out and "removed 0 orphaned" in out
    out = rft_gc(config, "--ttl", "0", "--dry-run")
    assert f"would remove {orphan_uri}: 1 file(s), 14 bytes" in out
    assert sorted(store.version_objects()) == [1, 2]
    out = rft_gc(config, "--ttl", "0s")
    assert f"removed {orphan_uri}" in out and "removed 1 orphaned version directory" in out
    assert sorted(store.version_objects()) == [1]
    assert store.list_versions() == [1]
    store.download(1, tmp_path / "dl")  # the complete version is intact and verifies


def stored_keys(store) -> dict[int, list[str]]:
    return {v: sorted(o.key for o in objs) for v, objs in store.version_objects().items()}


class KilledUpload(Exception):
    """Stands for a trainer killed after its files were up, before its manifest."""


def test_rft_gc_removes_strays_of_committed_versions_only(
    stack: StackSettings, unique: str, tmp_path: Path
):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(run_config(stack, unique, tmp_path)))
    store = RunPlan(load_config(config)).checkpoint_store()
    src = tmp_path / "weights"
    (src / "trainer_state").mkdir(parents=True)
    (src / "model.safetensors").write_bytes(b"w" * 100)
    (src / "trainer_state" / "sampler.json").write_text("{}")

    def killed(manifest) -> None:
        raise KilledUpload

    # v1's first upload is killed before its manifest; the restarted trainer writes v1 again,
    # under a directory of its own, and commits it: the first upload's files stay behind
    with pytest.raises(KilledUpload):
        store.write(1, 1, src, before_commit=killed)
    prefix = store.version_prefix(1)
    (killed_dir,) = {o.key[len(prefix) :].split("/")[0] for o in store.version_objects()[1]}
    store.write(1, 1, src)
    store.write(2, 2, src)
    stray_uri = store.store.uri(prefix + killed_dir)
    before = stored_keys(store)
    assert len(before[1]) == 5 and len(before[2]) == 3  # two files twice, one manifest

    out = rft_gc(config, "--ttl", "1h")
    assert f"kept {stray_uri}: 2 stray file(s) in committed v1, newest younger" in out
    out = rft_gc(config, "--ttl", "0", "--dry-run")
    assert f"would remove {stray_uri}: 2 stray file(s) in committed v1, 102 bytes" in out
    assert stored_keys(store) == before

    def mid_write(manifest) -> None:
        # v3's files are up and its manifest not yet: they are no version's strays
        assert [(s.version, s.uri) for s in find_strays(store)] == [(1, stray_uri)]

    store.write(3, 3, src, before_commit=mid_write)
    before[3] = stored_keys(store)[3]
    out = rft_gc(config, "--ttl", "0")
    assert f"removed {stray_uri}: 2 stray file(s) in committed v1" in out, out
    assert "removed 2 stray file(s) (102 bytes) in committed versions" in out
    assert "removed 0 orphaned" in out
    after = stored_keys(store)
    assert after[1] == [k for k in before[1] if f"/{killed_dir}/" not in k] and len(after[1]) == 3
    assert after[2] == before[2] and after[3] == before[3]
    for version in (1, 2, 3):
        store.download(version, tmp_path / f"dl{version}")  # intact, and every file verifies
