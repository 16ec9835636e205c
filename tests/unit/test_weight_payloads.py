"""Weights as safetensors bytes without a file, and the sha256 taken while bytes move.

`SafetensorsPayload` streams tensors straight from their memory and `tensors_from_safetensors`
reads them back as views: both agree with the safetensors library's own reader and writer. The
digests taken while copying (`Sha256Reader` on upload, `Sha256Sink` on download) equal a
separate sha256 of the same bytes, and a version whose stored bytes changed is refused on load
with an error naming the file's object key.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from rft.consumers.explorer.weight_follower import load_version
from rft.engines.models import ModelSpec
from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
from rft.engines.weights import SafetensorsPayload, tensors_from_safetensors, tensors_of_files
from rft.errors import CheckpointError, EngineError
from rft.storage import CheckpointStore, LocalObjectStore
from rft.storage.object_store_base import ObjectSizeError
from rft.storage.payload import BytesPayload, Sha256Reader, Sha256Sink


def _tensors() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return {
        "a.weight": torch.randn(7, 5, generator=gen),
        "b.bias": torch.randn(3, generator=gen).to(torch.bfloat16),  # 2-byte elements after 4
        "c.index": torch.arange(11, dtype=torch.int64),
        "d.scalar": torch.tensor(2.5, dtype=torch.float16),
        "e.empty": torch.empty(0, 4),
    }


def _read_all(payload: SafetensorsPayload, size: int = 13) -> bytes:
    stream = payload.open()
    out = bytearray()
    while piece := stream.read(size):
        out += piece
    return bytes(out)


def test_streamed_safetensors_are_what_the_library_reads_and_writes() -> None:
    tensors = _tensors()
    payload = SafetensorsPayload(tensors, {"format": "pt"})
    data = _read_all(payload)
    assert len(data) == payload.size
    theirs = st_load(data)
    ours = tensors_from_safetensors(bytearray(st_save(tensors)), "library bytes")
    for name, tensor in tensors.items():
        assert theirs[name].dtype == ours[name].dtype == tensor.dtype
        assert torch.equal(theirs[name], tensor) and torch.equal(ours[name], tensor)


def test_read_tensors_are_views_of_the_downloaded_buffer() -> None:
    buffer = bytearray(_read_all(SafetensorsPayload(_tensors())))
    tensors = tensors_from_safetensors(buffer, "buf")
    tensors["a.weight"][0, 0] = 123.0
    assert tensors_from_safetensors(buffer, "buf")["a.weight"][0, 0].item() == 123.0


def test_a_malformed_safetensors_buffer_names_its_source() -> None:
    data = bytearray(_read_all(SafetensorsPayload(_tensors())))
    with pytest.raises(EngineError, match="s3://b/v1/model.safetensors"):
        tensors_from_safetensors(data[:-3], "s3://b/v1/model.safetensors")
    with pytest.raises(EngineError, match="no model.safetensors"):
        tensors_of_files({"config.json": bytearray(b"{}")}, "v1/")


def test_digests_taken_while_copying_equal_a_separate_sha256() -> None:
    data = os.urandom(3 * (1 << 20) + 5)
    reader = Sha256Reader(BytesPayload(data).open())
    while reader.read(1 << 16):
        pass
    sink = Sha256Sink()
    view = memoryview(data)
    for at in range(0, len(data), 1 << 20):
        sink(view[at : at + (1 << 20)])
    assert reader.hexdigest() == sink.hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_version_written_from_memory_reads_back_verified_without_a_file(
    tmp_path: Path,
) -> None:
    objects = LocalObjectStore(tmp_path / "store")
    checkpoints = CheckpointStore(objects, "proj", "run")
    tensors = _tensors()
    manifest = checkpoints.write(
        1,
        1,
        None,
        payloads={"model.safetensors": SafetensorsPayload(tensors), "x.json": BytesPayload(b"{}")},
    )
    stored = objects.get_bytes(checkpoints.file_key(1, "model.safetensors"))
    assert manifest.file("model.safetensors").sha256 == hashlib.sha256(stored).hexdigest()
    _, files = checkpoints.read_files(1)
    assert bytes(files["model.safetensors"]) == stored
    back = tensors_of_files(files, "v1/")
    assert all(torch.equal(back[k], v) for k, v in tensors.items())


def test_get_into_refuses_an_object_of_another_size(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path / "store")
    objects.put_bytes("k", b"12345")
    assert bytes(objects.get_into("k", 5)) == b"12345"
    for wrong in (4, 6):
        with pytest.raises(ObjectSizeError, match="holds 5 bytes"):
            objects.get_into("k", wrong)


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_corrupted_byte_is_refused_on_load_naming_the_object_key(
    tmp_path: Path, where: str
) -> None:
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    trained = {k: v + 0.01 for k, v in engine.state_dict().items()}
    objects = LocalObjectStore(tmp_path / "store")
    checkpoints = CheckpointStore(objects, "proj", "run")
    checkpoints.write(1, 1, None, payloads={"model.safetensors": SafetensorsPayload(trained)})
    key = checkpoints.file_key(1, "model.safetensors")
    data = bytearray(objects.get_bytes(key))
    data[{"first": 0, "middle": len(data) // 2, "last": len(data) - 1}[where]] ^= 0x20
    objects.put_bytes(key, bytes(data))
    before = {k: v.clone() for k, v in engine.state_dict().items()}
    with pytest.raises(CheckpointError, match="is corrupt") as err:
        load_version(engine, checkpoints, 1)
    assert key in str(err.value) and "'model.safetensors'" in str(err.value)
    assert engine.model_version == 0
    assert all(torch.equal(before[k], v) for k, v in engine.state_dict().items())
