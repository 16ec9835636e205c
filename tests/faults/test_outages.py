"""Outages of Kafka and MinIO shorter than `stack.*.outage_timeout` are ridden out; longer ones
end the component with a message naming the service and its address.

Against a private stack (conftest.py), whose Kafka and MinIO these tests stop and start:

- Kafka stopped for a while under a running explorer and trainer (tiny model, `fixed` sync, so
  each waits for the other across the outage): both finish; the experiences trained are exactly
  those the log holds, none twice, no task explored twice; each process logs the outage once
  when it starts and once when it ends.
- MinIO stopped while a checkpoint is uploading: the writer waits, finishes the upload when MinIO
  is back, and only then announces the version; the manifest verifies.
- Kafka and MinIO down past a short outage_timeout: the trainer, and a checkpoint writer, exit
  non-zero naming the service and the address.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.run_plan import RunPlan
from rft.events.models import Experience, WeightVersion
from rft.events.topics import ensure_topics
from rft.events.transport import kafka_backend
from rft.events.writer import EventWriter
from rft.fault_points import ENV as FAULT_ENV
from rft.producers.task_publisher import TaskPublisher, load_run_tasksets, publish_tasksets
from rft.stack.local_stack import LocalStack
from rft.storage import CheckpointStore, S3ObjectStore
from tests.integration.test_rft_loop import run_config
from tests.topic_log import read_topic

# multi-process fault runs: in `make test-faults` (and `make test-all`), kept out of `make test`
pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.slow]

STEPS = 6
OUTAGE_S = 20.0  # well inside outage_timeout, and long enough for every client to notice
IN_STEP_PAUSE_S = 8.0  # longer than stopping the broker takes


def outage_lines(log: str, service: str, address: str) -> tuple[int, int]:
    """(outages opened, outages closed) as logged for `service` at `address`."""
    opened = log.count(f"{service} at {address} unreachable since")
    closed = log.count(f"{service} at {address} reachable again")
    return opened, closed


def summary_of(log: str) -> dict:
    """The JSON summary a verb prints last (client library lines may follow it in the log)."""
    return json.loads([line for line in log.splitlines() if line.startswith("{")][-1])


def start(verb: str, config: Path, log: Path, *overrides: str, pause: str = "") -> subprocess.Popen:
    """`rft VERB` logging to `log`; `pause`: its RFT_FAULT_PAUSE (rft.fault_points)."""
    argv = [sys.executable, "-m", "rft.cli.main", verb, "--config", str(config)]
    for item in overrides:
        argv += ["--override", item]
    env = {**os.environ, FAULT_ENV: pause} if pause else None
    return subprocess.Popen(
        argv, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True, env=env
    )


def wait_for_line(log: Path, pattern: str, procs: list[subprocess.Popen], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if re.search(pattern, log.read_text()):
            return
        for p in procs:
            assert p.poll() is None, f"a process ended early; {log}:\n{log.read_text()[-3000:]}"
        time.sleep(0.5)
    raise AssertionError(f"{pattern!r} not in {log} after {timeout_s}s:\n{log.read_text()[-3000:]}")


def read_log(stack: StackSettings, topic: str, group: str) -> list:
    """Every envelope of `topic` (tests.topic_log)."""
    return read_topic(stack.kafka, topic, group)


def published_run(stack: StackSettings, name: str, tmp: Path, outage_timeout: float):
    raw = run_config(stack, name, tmp, "fixed", 1)
    raw["buffer"]["total_steps"] = STEPS
    raw["stack"]["kafka"]["outage_timeout"] = outage_timeout
    raw["stack"]["object_store"]["outage_timeout"] = outage_timeout
    raw["stack"]["object_store"].update(
        access_key=stack.object_store.access_key, secret_key=stack.object_store.secret_key
    )
    config_path = tmp / "run.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    cfg = load_config(config_path)
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, plan.topics)
    with EventWriter.open(cfg.stack.kafka) as writer:
        publish_tasksets(
            TaskPublisher(writer), load_run_tasksets(cfg), plan.topics, epochs=1, seed=0
        )
    return config_path, cfg, plan


def test_kafka_outage_mid_run_is_ridden_out_with_nothing_lost_or_trained_twice(
    private_stack: LocalStack, unique: str, tmp_path: Path
) -> None:
    stack = private_stack.stack_settings()
    address = stack.kafka.bootstrap_servers
    config, cfg, plan = published_run(stack, unique, tmp_path, outage_timeout=240)
    logs = {name: tmp_path / f"{name}.log" for name in ("trainer", "explorer")}
    trainer = start("train", config, logs["trainer"])
    # each explorer step waits inside its transaction, so that the outage below begins while
    # one is open: an explorer idle between steps (waiting for a version) would ride it out
    # without a call that fails, and log no outage
    explorer = start(
        "explore", config, logs["explorer"], pause=f"explorer.in_transaction:{IN_STEP_PAUSE_S:g}"
    )
    procs = [trainer, explorer]
    try:
        # mid-run: a version announced and loaded, steps still to come on both sides
        wait_for_line(logs["trainer"], r"published weight version 2\b", procs, 400)
        # the explorer's step 3 (on version 2) holds its transaction open
        wait_for_line(
            logs["explorer"], r"(?s)(rft fault point explorer\.in_transaction.*){3}", procs, 120
        )
        private_stack.down(["kafka"])
        time.sleep(OUTAGE_S)
        assert all(p.poll() is None for p in procs), "a component gave up inside the window"
        private_stack.up(timeout_s=180, services=["kafka"])
        rcs = [p.wait(timeout=500) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    texts = {name: path.read_text() for name, path in logs.items()}
    assert rcs == [0, 0], {name: text[-3000:] for name, text in texts.items()}
    for name, text in texts.items():
        assert outage_lines(text, "kafka", address) == (1, 1), f"{name}:\n{text[-4000:]}"
        assert "retrying for up to 240 s (stack.kafka.outage_timeout)" in text

    trained, explored = summary_of(texts["trainer"]), summary_of(texts["explorer"])
    produced = [
        e.event
        for e in read_log(cfg.stack, plan.experience_topic, f"{unique}.check")
        if isinstance(e.event, Experience)
    ]
    ids = [x.experience_id for x in produced]
    assert len(ids) == len(set(ids)), "an experience was committed twice"
    groups_per_task: dict[str, set[str]] = {}
    for x in produced:
        groups_per_task.setdefault(x.task_id, set()).add(x.group_id)
    assert all(len(g) == 1 for g in groups_per_task.values()), "a task was explored twice"
    per_step = cfg.buffer.batch_size * cfg.algorithm.repeat_times
    assert explored["steps"] == trained["steps"] == STEPS
    # every experience committed to the log was trained, exactly once
    assert len(produced) == explored["experiences"] == trained["experiences"] == per_step * STEPS
    assert trained["dropped_stale"] == 0

    versions = [
        e.event
        for e in read_log(cfg.stack, plan.topics.weights, f"{unique}.check-weights")
        if isinstance(e.event, WeightVersion)
    ]
    assert sorted(v.version for v in versions) == list(range(1, STEPS + 1))
    assert plan.checkpoint_store().read_manifest(STEPS).version == STEPS


WRITER = """
import json, sys, time
from pathlib import Path
from rft.config.connections import KafkaSettings, ObjectStoreSettings
from rft.events.models import ManifestEntry, WeightVersion
from rft.events.writer import EventWriter
from rft.fault_points import ENV as FAULT_ENV
from rft.storage import CheckpointStore, S3ObjectStore
bootstrap, endpoint, bucket, prefix, src, topic, timeout = sys.argv[1:8]
settings = ObjectStoreSettings(endpoint=endpoint, bucket=bucket, outage_timeout=float(timeout))
with S3ObjectStore(settings, prefix=prefix) as store:
    ckpts = CheckpointStore(store, "proj", "run")
    manifest = ckpts.write(1, 1, Path(src), [])
    # the trainer's order: the manifest is written last, the version announced after it
    with EventWriter.open(KafkaSettings(bootstrap_servers=bootstrap)) as writer:
        writer.send(topic, WeightVersion(
            version=1, train_step=1, uri=ckpts.uri(1),
            manifest=tuple(ManifestEntry(f.name, f.size, f.sha256) for f in manifest.files),
            consumed_offsets=(), parent_version=0))
        writer.flush()
    print(json.dumps({"announced_at": time.time()}))
"""

FILES, FILE_SIZE = 6, 8 * 1024 * 1024


def start_writer(
    stack: StackSettings, prefix: str, src: Path, topic: str, timeout_s: float, log: Path
) -> subprocess.Popen:
    argv = [sys.executable, "-c", WRITER, stack.kafka.bootstrap_servers]
    argv += [stack.object_store.endpoint, "rft-outage", prefix, str(src), topic, str(timeout_s)]
    env = dict(os.environ)
    env.update(
        RFT_S3_ACCESS_KEY=stack.object_store.access_key,
        RFT_S3_SECRET_KEY=stack.object_store.secret_key,
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    return subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


def big_checkpoint(root: Path) -> Path:
    src = root / "model"
    src.mkdir()
    for i in range(FILES):
        (src / f"shard-{i}.bin").write_bytes(os.urandom(FILE_SIZE))
    return src


def wait_for_first_object(store: S3ObjectStore, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while not store.list():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the upload never started"
        time.sleep(0.05)


def test_minio_outage_mid_upload_announces_only_after_a_complete_upload(
    private_stack: LocalStack, unique: str, tmp_path: Path
) -> None:
    stack = private_stack.stack_settings()
    topic = f"faults.{unique}.weights"
    ensure_topics(stack.kafka, [topic])
    store = S3ObjectStore(stack.object_store, bucket="rft-outage", prefix=unique)
    store.ensure_bucket()
    log = tmp_path / "writer.log"
    writer = start_writer(stack, unique, big_checkpoint(tmp_path), topic, 240, log)
    try:
        wait_for_first_object(store, writer, log)
        private_stack.down(["minio"])
        checkpoints = CheckpointStore(store, "proj", "run")
        time.sleep(OUTAGE_S)
        assert writer.poll() is None, log.read_text()[-3000:]
        private_stack.up(timeout_s=120, services=["minio"])
        back_at = time.time()
        rc = writer.wait(timeout=300)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert outage_lines(text, "object store", stack.object_store.endpoint) == (1, 1), text
    announced_at = summary_of(text)["announced_at"]
    assert announced_at >= back_at  # announced after MinIO came back, never before
    (announce,) = [e.event for e in read_log(stack, topic, f"{unique}.read")]
    manifest = checkpoints.read_manifest(1)
    assert [(f.name, f.size, f.sha256) for f in manifest.files] == [
        (m.name, m.size, m.sha256) for m in announce.manifest
    ]
    assert len(manifest.files) == FILES
    checkpoints.download(1, tmp_path / "verified")  # every file's sha256 checks out


def wait_for_member(stack: StackSettings, group: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 300
    with kafka_backend(stack.kafka).admin() as admin:
        while not admin.describe_groups([group])[0].members:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the trainer never joined its group"
            time.sleep(0.5)


def test_past_the_window_the_trainer_and_a_checkpoint_writer_exit_naming_the_address(
    private_stack: LocalStack, unique: str, tmp_path: Path
) -> None:
    stack = private_stack.stack_settings()
    config, cfg, plan = published_run(stack, unique, tmp_path, outage_timeout=8)
    log = tmp_path / "trainer.log"
    # no explorer: the trainer only waits for experiences, polling, when Kafka goes away
    trainer = start(
        "train", config, log, "buffer.trainer_input.experience_buffer.max_read_timeout=600"
    )
    try:
        wait_for_member(stack, plan.trainer_group, trainer, log)  # polling for experiences
        private_stack.down(["kafka"])
        rc = trainer.wait(timeout=180)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
        private_stack.up(timeout_s=180, services=["kafka"])
    text = log.read_text()
    assert rc != 0, text[-3000:]
    assert "rft train: error: kafka at " + stack.kafka.bootstrap_servers + " unreachable" in text
    assert "past stack.kafka.outage_timeout = 8 s" in text

    store = S3ObjectStore(stack.object_store, bucket="rft-outage", prefix=unique)
    store.ensure_bucket()
    topic = f"faults.{unique}.weights"
    ensure_topics(stack.kafka, [topic])
    wlog = tmp_path / "writer.log"
    writer = start_writer(stack, unique, big_checkpoint(tmp_path), topic, 6, wlog)
    try:
        wait_for_first_object(store, writer, wlog)
        private_stack.down(["minio"])
        rc = writer.wait(timeout=180)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        private_stack.up(timeout_s=120, services=["minio"])
    wtext = wlog.read_text()
    assert rc != 0, wtext[-3000:]
    assert f"OutageError: object store at {stack.object_store.endpoint} unreachable" in wtext
    assert "past stack.object_store.outage_timeout = 6 s" in wtext
    # The manifest, written last, is the commit point. The outage may come before it (no
    # version), or take the answer to its conditional PUT after MinIO stored it: then the version
    # is whole, every file up before its manifest. Either way the writer exited unannounced.
    checkpoints = CheckpointStore(store, "proj", "run")
    for version in checkpoints.list_versions():
        checkpoints.download(version, tmp_path / f"verified-{version}")  # every sha256 checks out
    assert read_log(stack, topic, f"{unique}.read") == []
