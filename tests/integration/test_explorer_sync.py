"""ExplorerSync on the real Kafka and MinIO: an explorer step that needs a weight version waits for
it and never rolls out on older weights; per `synchronizer.sync_timeout` it counts a timeout and,
as `synchronizer.on_sync_timeout` says, keeps waiting or stops with an error naming the step, the
version and the topic. fully_async loads a version announced mid-step before the next rollout
chunk; trainer_driven leaves it for the next step.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from rft.config.connections import StackSettings
from rft.config.schema import SynchronizerConfig
from rft.consumers.explorer.sync import ExplorerSync, SyncTimeoutError
from rft.consumers.explorer.weight_follower import WeightFollower
from rft.engines.models import ModelSpec
from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
from rft.events.models import ManifestEntry, SyncRequest, WeightVersion
from rft.events.reader import EventReader
from rft.events.topics import TopicNames, ensure_topics
from rft.events.writer import EventWriter
from rft.storage.checkpoint_store import CheckpointStore
from rft.storage.object_store import S3ObjectStore
from rft.synchronizer import build_sync_style

pytestmark = pytest.mark.integration


class Weights:
    """A stand-in trainer's output: real verified checkpoints in MinIO, announced on Kafka."""

    def __init__(
        self, kafka, topics: TopicNames, store: CheckpointStore, tmp: Path, engine
    ) -> None:
        self.kafka = kafka
        self.topics = topics
        ensure_topics(kafka, topics)
        self.store = store
        self.tmp = tmp
        self.base = {k: v.clone() for k, v in engine.state_dict().items()}
        self.newest = 0

    @classmethod
    def for_test(cls, stack: StackSettings, unique: str, tmp: Path, engine) -> Weights:
        store = CheckpointStore(
            S3ObjectStore(stack.object_store, bucket="rft-it"), "rft-it", unique
        )
        return cls(stack.kafka, TopicNames.for_run("rft-it", unique), store, tmp, engine)

    def publish(self, version: int) -> None:
        from safetensors.torch import save_file

        folder = self.tmp / f"v{version}"
        folder.mkdir(parents=True, exist_ok=True)
        save_file(
            {k: v + 0.001 * version for k, v in self.base.items()},
            str(folder / "model.safetensors"),
        )
        manifest = self.store.write(version, version, folder)
        self.newest = max(self.newest, version)
        entries = tuple(ManifestEntry(f.name, f.size, f.sha256) for f in manifest.files)
        with EventWriter.open(self.kafka) as writer:
            writer.send(
                self.topics.weights,
                WeightVersion(version, version, self.store.uri(version), entries),
            )
            writer.flush()


@pytest.fixture
def engine():
    return create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))


def explorer_sync(weights: Weights, follower: WeightFollower, **settings) -> ExplorerSync:
    cfg = SynchronizerConfig(**settings)
    style = build_sync_style(
        cfg.sync_style, cfg.sync_interval, cfg.sync_offset, cfg.max_head_offpolicyness
    )
    return ExplorerSync(
        cfg,
        style,
        follower,
        explorer_id="ex-1",
        control_topic=weights.topics.control,
        weights_topic=weights.topics.weights,
    )


def test_fixed_stops_with_the_reason_when_on_sync_timeout_is_stop(
    stack: StackSettings, unique: str, tmp_path: Path, engine
) -> None:
    weights = Weights.for_test(stack, unique, tmp_path, engine)
    with WeightFollower(stack.kafka, weights.topics.weights, unique, weights.store) as follower:
        sync = explorer_sync(
            weights, follower, sync_style="fixed", sync_timeout=1.0, on_sync_timeout="stop"
        )
        with EventWriter.open(stack.kafka) as writer:
            assert sync.before_step(1, engine, writer).required == 0  # step 1 needs the base
            with pytest.raises(SyncTimeoutError) as err:
                sync.before_step(2, engine, writer)  # needs version 1, which never comes
    message = str(err.value)
    assert "step 2 needs weight version 1" in message and weights.topics.weights in message
    assert "on_sync_timeout: stop" in message
    assert sync.counters.timeouts == 1 and engine.model_version == 0


def test_fixed_waits_past_timeouts_counts_them_and_loads_the_version(
    stack: StackSettings, unique: str, tmp_path: Path, engine
) -> None:
    weights = Weights.for_test(stack, unique, tmp_path, engine)
    with WeightFollower(stack.kafka, weights.topics.weights, unique, weights.store) as follower:
        sync = explorer_sync(
            weights, follower, sync_style="fixed", sync_timeout=1.0, on_sync_timeout="wait"
        )
        late = threading.Timer(4.0, weights.publish, args=(1,))
        late.start()
        try:
            with EventWriter.open(stack.kafka) as writer:
                step = sync.before_step(2, engine, writer)
        finally:
            late.join()
    assert engine.model_version == 1  # it rolled out on nothing older than what step 2 needs
    assert step.required == 1 and step.wait_s >= 3.0
    assert sync.counters.timeouts >= 2  # one per second of waiting, roughly; never zero
    metrics = step.metrics(sync.counters)
    assert metrics["sync_timeouts_total"] == sync.counters.timeouts
    assert metrics["weight_wait_s"] == step.wait_s and metrics["versions_ahead"] == 0.0


def test_eta_holds_a_trainer_driven_explorer_to_the_newest_version(
    stack: StackSettings, unique: str, tmp_path: Path, engine
) -> None:
    weights = Weights.for_test(stack, unique, tmp_path, engine)
    with WeightFollower(stack.kafka, weights.topics.weights, unique, weights.store) as follower:
        sync = explorer_sync(
            weights,
            follower,
            sync_style="trainer_driven",
            sync_timeout=1.0,
            on_sync_timeout="stop",
            max_head_offpolicyness=1,
        )
        with EventWriter.open(stack.kafka) as writer:
            for step in (1, 2):  # within η of version 0: no waiting
                assert sync.before_step(step, engine, writer).required == 0
            with pytest.raises(SyncTimeoutError, match="step 3 needs weight version 1"):
                sync.before_step(3, engine, writer)
            weights.publish(1)
            assert (
                sync.before_step(3, engine, writer).metrics(sync.counters)["versions_ahead"] == 1.0
            )
    assert engine.model_version == 1


def test_fully_async_loads_between_rollouts_and_trainer_driven_between_steps(
    stack: StackSettings, unique: str, tmp_path: Path, engine
) -> None:
    weights = Weights.for_test(stack, unique, tmp_path, engine)
    for style, loads_mid_step in (("fully_async", True), ("trainer_driven", False)):
        engine.load_state_dict(weights.base, 0)
        group = f"{unique}-{style}"
        with WeightFollower(stack.kafka, weights.topics.weights, group, weights.store) as follower:
            sync = explorer_sync(weights, follower, sync_style=style, sync_interval=1)
            with EventWriter.open(stack.kafka) as writer:
                version_at_start = sync.before_step(1, engine, writer)
                sync.between_rollouts(engine, ["a", "b"])  # first chunk
                newer = weights.newest + 1
                weights.publish(newer)
                follower.wait_for(newer, timeout_s=30)
                sync.between_rollouts(engine, ["c"])  # second chunk, after the announcement
            step = sync.current
        assert step is version_at_start
        first = step.task_versions["a"]
        assert step.task_versions["b"] == first
        if loads_mid_step:
            assert step.task_versions["c"] == newer and step.loads_in_step == 1
        else:
            assert step.task_versions["c"] == first and step.loads_in_step == 0


def test_request_style_asks_when_eta_needs_a_version(
    stack: StackSettings, unique: str, tmp_path: Path, engine
) -> None:
    """dynamic_by_explorer publishes on request only: an explorer held by η must ask, or it
    would wait for a version nobody is making."""
    weights = Weights.for_test(stack, unique, tmp_path, engine)
    with WeightFollower(stack.kafka, weights.topics.weights, unique, weights.store) as follower:
        sync = explorer_sync(
            weights,
            follower,
            sync_style="dynamic_by_explorer",
            sync_interval=10,
            sync_timeout=1.0,
            on_sync_timeout="stop",
            max_head_offpolicyness=0,
        )
        with EventWriter.open(stack.kafka) as writer, pytest.raises(SyncTimeoutError):
            sync.before_step(2, engine, writer)
    requests = []
    with EventReader.open(
        stack.kafka, unique + "-c", [weights.topics.control], from_beginning=True
    ) as r:
        deadline = time.monotonic() + 20
        while not requests and time.monotonic() < deadline:
            requests += [e.event for e in r.poll(10, timeout_s=1.0)]
    assert requests and isinstance(requests[0], SyncRequest) and requests[0].step == 2
