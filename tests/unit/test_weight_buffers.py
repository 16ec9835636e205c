"""An explorer's kept download buffers (rft.consumers.explorer.weight_buffers): each version's
weight files land in the buffers the last version filled, the engine ends up with each version's
own weights, and adapter versions and a trainer's files get buffers of their own."""

from __future__ import annotations

from pathlib import Path

import torch

from rft.consumers.explorer.weight_buffers import WeightBuffers
from rft.consumers.explorer.weight_follower import load_version
from rft.engines.lora import ADAPTER_KIND, EXTRA_ADAPTER
from rft.engines.models import ModelSpec
from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
from rft.engines.weights import safetensors_payloads
from rft.storage import CheckpointStore, LocalObjectStore
from rft.storage.checkpoint_manifest import CheckpointManifest, ManifestFile


def _address(view: memoryview) -> int:
    return torch.frombuffer(view, dtype=torch.uint8).data_ptr()


def test_versions_land_in_the_same_buffers_and_the_engine_gets_each_its_own(
    tmp_path: Path,
) -> None:
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    assert engine.weights_on_gpu is False
    base = engine.state_dict()
    versions = {v: {k: t + 0.01 * v for k, t in base.items()} for v in (1, 2, 3)}
    shard_bytes = sum(t.nbytes for t in base.values()) // 3
    checkpoints = CheckpointStore(LocalObjectStore(tmp_path / "store"), "proj", "run")
    for version, tensors in versions.items():
        payloads = dict(safetensors_payloads(tensors, None, shard_bytes))
        checkpoints.write(version, version, None, payloads=payloads)

    # the views stay referenced here, so a buffer made anew could not reuse a freed one's address
    seen: list[dict[str, memoryview]] = []

    class Recording(WeightBuffers):
        def __call__(self, manifest: CheckpointManifest, entry: ManifestFile) -> memoryview | None:
            view = super().__call__(manifest, entry)
            if view is not None:
                seen[-1][entry.name] = view
            return view

    buffers = Recording(pinned=False)
    for version in (1, 2, 3):
        seen.append({})
        load_version(engine, checkpoints, version, buffers)
        got = engine.state_dict()
        assert all(torch.equal(got[k], versions[version][k]) for k in base), version
    # every weight shard (not the index) of every version went into the first version's buffer
    assert len(seen[0]) == 3 and all(name.endswith(".safetensors") for name in seen[0])
    addresses = [{name: _address(view) for name, view in got.items()} for got in seen]
    assert addresses[1] == addresses[0] and addresses[2] == addresses[0]
    assert buffers.held_bytes == sum(
        f.size for f in checkpoints.read_manifest(3).files if f.name.endswith(".safetensors")
    )


def _manifest(extra: dict[str, str], *files: ManifestFile) -> CheckpointManifest:
    return CheckpointManifest(
        version=1, train_step=1, created_at=0, files=files, consumed_offsets=(), extra=extra
    )


def test_only_a_full_versions_weight_files_are_kept_and_unused_ones_are_let_go() -> None:
    buffers = WeightBuffers(pinned=False)
    shard = ManifestFile("model.safetensors", 64, "0" * 64)
    full = _manifest({}, shard)
    assert buffers(full, shard) is not None
    assert buffers(full, ManifestFile("config.json", 10, "0" * 64)) is None
    assert buffers(full, ManifestFile("trainer_state/master/model.safetensors", 8, "0")) is None
    buffers.settle(complete=False)  # a download that failed lets go of nothing
    assert buffers.held_bytes == 64
    buffers.settle()
    assert buffers.held_bytes == 0  # that version used none: the model's files changed
    assert buffers(full, shard) is not None
    buffers.settle()
    assert buffers.held_bytes == 64
    adapter = _manifest({EXTRA_ADAPTER: ADAPTER_KIND}, shard)
    assert buffers(adapter, shard) is None  # an engine may keep an adapter's tensors
    buffers.settle()  # a version that used no kept buffer: they are let go
    assert buffers.held_bytes == 0
    bigger = ManifestFile("model.safetensors", 128, "0" * 64)
    first = buffers(full, bigger)
    buffers.settle()
    again = buffers(full, bigger)
    assert first is not None and again is not None and _address(first) == _address(again)
    assert buffers.held_bytes == 128
