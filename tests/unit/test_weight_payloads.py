"""Weights as safetensors bytes without a file, and the sha256 taken while bytes move.

`SafetensorsPayload` streams tensors straight from their memory and `tensors_from_safetensors`
reads them back as views: both agree with the safetensors library's own reader and writer. The
digests taken while copying (`Sha256Reader` on upload, `Sha256Sink` on download) equal a
separate sha256 of the same bytes, and a version whose stored bytes changed is refused on load
with an error naming the file's object key.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from rft.consumers.explorer.weight_follower import load_version
from rft.engines.models import ModelSpec
from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
from rft.engines.weights import (
    SafetensorsPayload,
    safetensors_payloads,
    shard_names,
    tensors_from_safetensors,
    tensors_of_files,
)
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


def test_a_digest_that_lags_holds_the_producer_at_its_bound_of_bytes() -> None:
    sink = Sha256Sink()
    sink._IN_FLIGHT_BYTES = 10  # small, so a few bytes show the bound
    gate = threading.Event()
    real = sink._sha256

    class Lagging:
        def update(self, piece: memoryview) -> None:
            gate.wait(timeout=30)
            real.update(piece)

        def hexdigest(self) -> str:
            return real.hexdigest()

    sink._sha256 = Lagging()  # type: ignore[assignment]
    data = b"abcdefghijklmnopqrstuvwxyz" * 2
    handed: list[int] = []

    def produce() -> None:
        for at, size in ((0, 4), (4, 4), (8, 4), (12, 40)):
            sink(memoryview(data)[at : at + size])
            handed.append(at)

    producer = threading.Thread(target=produce)
    producer.start()
    producer.join(timeout=1.0)
    assert handed == [0, 4]  # 8 bytes wait; 4 more would pass the bound of 10
    gate.set()
    producer.join(timeout=30)
    assert handed == [0, 4, 8, 12]  # a piece over the bound goes alone
    assert sink.hexdigest() == hashlib.sha256(data[:52]).hexdigest()


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


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=40),
    shard_elements=st.integers(1, 64),
)
def test_shards_hold_every_tensor_once_in_name_order_and_about_equal_bytes(
    sizes: list[int], shard_elements: int
) -> None:
    tensors = {f"t{i:03d}": torch.zeros(n, dtype=torch.float32) for i, n in enumerate(sizes)}
    shard_bytes = 4 * shard_elements
    groups = shard_names(tensors, shard_bytes)
    assert [name for group in groups for name in group] == sorted(tensors)
    assert all(groups) and 1 <= len(groups) <= 16
    total = 4 * sum(sizes)
    if total < 2 * shard_bytes:
        assert len(groups) == 1
    largest = 4 * max(sizes)
    for group in groups:
        assert 4 * sum(tensors[n].numel() for n in group) <= total / len(groups) + largest


def test_sharded_weights_are_an_hf_index_and_read_back_whole() -> None:
    tensors = {f"layer.{i}.weight": torch.randn(64, 64) for i in range(10)}  # 16 KiB each
    files = safetensors_payloads(tensors, {"format": "pt"}, shard_bytes=40 << 10)
    assert "model.safetensors" not in files and "model.safetensors.index.json" in files
    shards = sorted(n for n in files if n != "model.safetensors.index.json")
    assert shards == [f"model-0000{k}-of-00004.safetensors" for k in range(1, 5)]
    read = {name: bytearray(_read_all(payload)) for name, payload in files.items()}
    index = json.loads(bytes(read["model.safetensors.index.json"]))
    assert sorted(index["weight_map"]) == sorted(tensors)
    assert index["metadata"]["total_size"] == sum(t.nbytes for t in tensors.values())
    back = tensors_of_files(read, "v1/")
    assert sorted(back) == sorted(tensors)
    assert all(torch.equal(back[k], v) for k, v in tensors.items())
    # below twice the shard size: one file, as before
    assert list(safetensors_payloads(tensors, shard_bytes=1 << 20)) == ["model.safetensors"]


def test_a_sharded_version_loads_and_a_corrupt_shard_is_refused_by_name(tmp_path: Path) -> None:
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    trained = {k: v + 0.01 for k, v in engine.state_dict().items()}
    shard_bytes = sum(t.nbytes for t in trained.values()) // 4
    objects = LocalObjectStore(tmp_path / "store")
    checkpoints = CheckpointStore(objects, "proj", "run")
    for version in (1, 2):
        checkpoints.write(
            version, version, None, payloads=dict(safetensors_payloads(trained, None, shard_bytes))
        )
    load_version(engine, checkpoints, 1)
    assert engine.model_version == 1
    assert all(torch.equal(trained[k], v) for k, v in engine.state_dict().items())
    shard = "model-00003-of-00004.safetensors"
    key = checkpoints.file_key(2, shard)
    data = bytearray(objects.get_bytes(key))
    data[len(data) // 2] ^= 0x01
    objects.put_bytes(key, bytes(data))
    with pytest.raises(CheckpointError, match="is corrupt") as err:
        load_version(engine, checkpoints, 2)
    assert key in str(err.value) and repr(shard) in str(err.value)
    assert engine.model_version == 1


class _MeetingPayload:
    """A file whose stream's first read waits for every other such file's first read: a
    version of several of them uploads only if its files move at the same time."""

    def __init__(self, data: bytes, meeting: threading.Barrier) -> None:
        self._inner = BytesPayload(data)
        self._meeting = meeting

    @property
    def size(self) -> int:
        return self._inner.size

    def open(self) -> Any:
        inner, meeting = self._inner.open(), self._meeting

        class Stream:
            first = True

            def read(self, size: int = -1, /) -> Any:
                if self.first:
                    self.first = False
                    meeting.wait(timeout=20)
                return inner.read(size)

            def seek(self, offset: int, whence: int = 0, /) -> int:
                return inner.seek(offset, whence)

            def close(self) -> None:
                inner.close()

        return Stream()


def test_a_versions_files_move_at_the_same_time_and_one_failure_fails_the_version(
    tmp_path: Path,
) -> None:
    objects = LocalObjectStore(tmp_path / "store")
    checkpoints = CheckpointStore(objects, "proj", "run")
    meeting = threading.Barrier(4)
    blobs = {f"f{i}.bin": os.urandom(1000 + i) for i in range(4)}
    checkpoints.write(
        1, 1, None, payloads={n: _MeetingPayload(b, meeting) for n, b in blobs.items()}
    )
    _, files = checkpoints.read_files(1)
    assert {n: bytes(v) for n, v in files.items()} == blobs

    class Unreadable:
        size = 10

        def open(self) -> Any:
            raise OSError("disk gone")

    payloads: dict[str, Any] = {"a.bin": BytesPayload(b"a" * 10), "b.bin": Unreadable()}
    with pytest.raises(CheckpointError, match="cannot read b.bin: disk gone"):
        checkpoints.write(2, 2, None, payloads=payloads)
    assert not checkpoints.has_manifest(2) and checkpoints.latest_version() == 1
