"""WeightFollower: an announced version is loaded only if its checkpoint is complete and verified.

A version whose manifest is missing, or whose object no longer matches the manifest's sha256, is
refused with the reason, and the rollout engine keeps serving the weights it had.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rft.config.connections import StackSettings
from rft.consumers.explorer.weight_follower import WeightFollower
from rft.engines.models import ModelSpec
from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
from rft.errors import CheckpointError
from rft.events.models import ManifestEntry, WeightVersion
from rft.events.topics import TopicNames, ensure_topics
from rft.events.writer import EventWriter
from rft.storage.checkpoint_store import CheckpointStore
from rft.storage.object_store import S3ObjectStore

pytestmark = pytest.mark.integration


def announce(stack: StackSettings, topic: str, store: CheckpointStore, version: int) -> None:
    manifest_entries: tuple[ManifestEntry, ...] = ()
    try:
        manifest = store.read_manifest(version)
        manifest_entries = tuple(ManifestEntry(f.name, f.size, f.sha256) for f in manifest.files)
    except CheckpointError:
        pass  # a version without a manifest is announced anyway: the explorer must refuse it
    with EventWriter.open(stack.kafka) as writer:
        writer.send(topic, WeightVersion(version, version, store.uri(version), manifest_entries))
        writer.flush()


def perturbed_checkpoint(engine, tmp: Path, scale: float) -> Path:
    state = {k: v.clone() + scale for k, v in engine.state_dict().items()}
    from safetensors.torch import save_file

    tmp.mkdir(parents=True, exist_ok=True)
    save_file(state, str(tmp / "model.safetensors"))
    return tmp


def test_only_verified_versions_are_loaded(stack: StackSettings, unique: str, tmp_path: Path):
    topics = TopicNames.for_run("rft-it", unique)
    ensure_topics(stack.kafka, topics)
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    before = {k: v.clone() for k, v in engine.state_dict().items()}
    objects = S3ObjectStore(stack.object_store, bucket="rft-it")
    store = CheckpointStore(objects, "rft-it", unique)

    # v1: complete, then one object is overwritten behind the manifest's back
    store.write(1, 1, perturbed_checkpoint(engine, tmp_path / "v1", 0.01))
    objects.put_bytes(store.file_key(1, "model.safetensors"), b"not the weights")
    # v2: the files are there but the manifest never was (a writer died before it)
    objects.put_file(
        store.version_prefix(2) + "model.safetensors",
        perturbed_checkpoint(engine, tmp_path / "v2", 0.02) / "model.safetensors",
    )
    with WeightFollower(stack.kafka, topics.weights, unique, store) as follower:
        announce(stack, topics.weights, store, 1)
        assert follower.wait_for(1, timeout_s=30) == 1
        assert not follower.load_newest(engine)
        assert engine.model_version == 0
        assert "sha256" in follower.refused[1] or "size" in follower.refused[1]

        announce(stack, topics.weights, store, 2)
        assert follower.wait_for(2, timeout_s=30) == 2
        assert not follower.load_newest(engine)
        assert "manifest" in follower.refused[2]
        assert engine.model_version == 0
        for name, tensor in engine.state_dict().items():
            assert torch.equal(tensor, before[name]), f"{name} changed by a refused version"

        # v3: a good version is loaded, and changes the weights
        store.write(3, 3, perturbed_checkpoint(engine, tmp_path / "v3", 0.03))
        announce(stack, topics.weights, store, 3)
        assert follower.wait_for(3, timeout_s=30) == 3
        assert follower.load_newest(engine)
        assert engine.model_version == 3
        name = next(iter(before))
        assert torch.allclose(engine.state_dict()[name], before[name] + 0.03)


def test_the_version_after_a_loaded_one_is_fetched_while_it_is_written(
    stack: StackSettings, unique: str, tmp_path: Path
):
    topics = TopicNames.for_run("rft-it", unique)
    ensure_topics(stack.kafka, topics)
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    base = {k: v.clone() for k, v in engine.state_dict().items()}
    store = CheckpointStore(S3ObjectStore(stack.object_store, bucket="rft-it"), "rft-it", unique)
    with WeightFollower(stack.kafka, topics.weights, unique, store) as follower:
        store.write(1, 1, perturbed_checkpoint(engine, tmp_path / "v1", 0.01))
        announce(stack, topics.weights, store, 1)
        assert follower.wait_for(1, timeout_s=30) == 1
        assert follower.load_newest(engine)
        assert follower.prefetched_files == 0  # the first version has no kept buffer to land in
        held = {k: v.clone() for k, v in engine.state_dict().items()}
        # v2 is written after v1 was loaded: the follower watches for it meanwhile
        for version in (2, 3):
            ahead = perturbed_checkpoint(engine, tmp_path / f"v{version}", 0.01)
            store.write(version, version, ahead)
            announce(stack, topics.weights, store, version)
            assert follower.wait_for(version, timeout_s=30) == version
            # the prefetch filled the kept buffers meanwhile; the engine copied the last
            # version out of them, so it still serves that one, unchanged
            serving = engine.state_dict()
            assert all(torch.equal(serving[k], held[k]) for k in held)
            assert follower.load_newest(engine)
            assert engine.model_version == version
            held = {k: v.clone() for k, v in engine.state_dict().items()}
            # the one weights file came from the prefetch, and is the version's own
            assert follower.prefetched_files == version - 1
            name = next(iter(base))
            assert torch.allclose(engine.state_dict()[name], base[name] + 0.01 * version)
