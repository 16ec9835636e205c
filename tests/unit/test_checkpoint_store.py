"""CheckpointStore logic on a real local object store: versions, immutability, input checks,
pruning. The same behaviour against MinIO lives in tests/integration/test_storage_contract.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rft.errors import CheckpointError
from rft.storage import BASE_VERSION, CheckpointStore, ConsumedOffset, LocalObjectStore


def _source(tmp_path: Path, tag: str = "a") -> Path:
    src = tmp_path / f"src-{tag}"
    (src / "tok").mkdir(parents=True)
    (src / "model.safetensors").write_bytes(f"weights {tag}".encode() * 100)
    (src / "tok" / "tokenizer.json").write_text(json.dumps({"tag": tag}))
    return src


@pytest.fixture
def ckpts(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(LocalObjectStore(tmp_path / "store"), "proj", "run")


def test_no_checkpoint_means_base_model(ckpts: CheckpointStore) -> None:
    assert ckpts.list_versions() == []
    assert ckpts.latest_version() == BASE_VERSION == 0
    with pytest.raises(CheckpointError, match="base model"):
        ckpts.read_manifest(0)
    with pytest.raises(CheckpointError, match="base model"):
        ckpts.write(0, 0, Path("."))


def test_layout_and_manifest_contents(ckpts: CheckpointStore, tmp_path: Path) -> None:
    manifest = ckpts.write(
        7, 70, _source(tmp_path), [("p.r.experiences", 1, 40)], parent_version=6, extra={"lr": 1e-6}
    )
    keys = sorted(i.key for i in ckpts.store.list())
    # the files sit in a directory of this write's own, which the manifest names
    files = f"proj/run/v000007/{manifest.extra['object_dir']}/"
    assert keys == sorted(
        [
            "proj/run/v000007/manifest.json",
            files + "model.safetensors",
            files + "tok/tokenizer.json",
        ]
    )
    assert manifest.extra["lr"] == 1e-6
    assert [f.name for f in manifest.files] == ["model.safetensors", "tok/tokenizer.json"]
    assert manifest.consumed_offsets == (ConsumedOffset("p.r.experiences", 1, 40),)
    assert ckpts.read_manifest(7) == manifest
    assert ckpts.uri(7).endswith("/store/proj/run/v000007/")


def test_versions_are_immutable(ckpts: CheckpointStore, tmp_path: Path) -> None:
    ckpts.write(1, 1, _source(tmp_path))
    with pytest.raises(CheckpointError, match="already exists"):
        ckpts.write(1, 2, _source(tmp_path, "b"))


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"parent_version": 5}, r"parent_version must be in \[0, 5\)"),
        ({"consumed_offsets": [("t", -1, 0)]}, "partition -1 of topic 't'"),
        ({"consumed_offsets": [("t", 0)]}, "not \\(topic, partition, offset\\)"),
        ({"consumed_offsets": [("", 0, 0)]}, "topic '' is invalid"),
    ],
)
def test_bad_write_arguments(
    ckpts: CheckpointStore, tmp_path: Path, kwargs: dict, words: str
) -> None:
    with pytest.raises(CheckpointError, match=words):
        ckpts.write(5, 1, _source(tmp_path), **kwargs)
    assert ckpts.store.list() == []


def test_bad_sources(ckpts: CheckpointStore, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not a directory"):
        ckpts.write(1, 1, tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds no files"):
        ckpts.write(1, 1, tmp_path / "empty")
    src = _source(tmp_path)
    (src / "manifest.json").write_text("{}")
    with pytest.raises(CheckpointError, match="reserved"):
        ckpts.write(1, 1, src)


def test_bad_names() -> None:
    with pytest.raises(CheckpointError, match="project"):
        CheckpointStore(LocalObjectStore("/tmp/x"), "a/b", "run")
    with pytest.raises(CheckpointError, match="name"):
        CheckpointStore(LocalObjectStore("/tmp/x"), "p", "..")


def test_download_refuses_a_non_empty_destination(ckpts: CheckpointStore, tmp_path: Path) -> None:
    ckpts.write(1, 1, _source(tmp_path))
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "old").write_text("x")
    with pytest.raises(CheckpointError, match="not empty"):
        ckpts.download(1, dest)
    (dest / "old").unlink()
    assert ckpts.download(1, dest) == dest
    assert (dest / "model.safetensors").read_bytes() == b"weights a" * 100


def test_manifest_in_the_wrong_directory_is_rejected(
    ckpts: CheckpointStore, tmp_path: Path
) -> None:
    ckpts.write(1, 1, _source(tmp_path))
    store = ckpts.store
    store.put_bytes(
        "proj/run/v000002/manifest.json", store.get_bytes("proj/run/v000001/manifest.json")
    )
    with pytest.raises(CheckpointError, match="says version 1"):
        ckpts.read_manifest(2)


def test_prune_keeps_newest_and_removes_old_leftovers(
    ckpts: CheckpointStore, tmp_path: Path
) -> None:
    for version in (1, 2, 3, 4):
        ckpts.write(version, version * 10, _source(tmp_path, str(version)))
    store = ckpts.store
    store.put_bytes("proj/run/v000000/stray.bin", b"crashed write below the newest")
    store.put_bytes("proj/run/v000009/model.safetensors", b"write in progress above the newest")
    assert ckpts.prune(keep_last=2) == [0, 1, 2]
    assert ckpts.list_versions() == [3, 4]
    assert store.exists("proj/run/v000009/model.safetensors")
    assert not any(i.key.startswith("proj/run/v000001/") for i in store.list())
    assert ckpts.prune(keep_last=1) == [3]
    assert ckpts.prune(keep_last=1) == []
    assert ckpts.latest_version() == 4
    with pytest.raises(CheckpointError, match="keep_last"):
        ckpts.prune(keep_last=0)


def test_prune_with_no_versions_does_nothing(ckpts: CheckpointStore) -> None:
    ckpts.store.put_bytes("proj/run/v000001/half", b"x")
    assert ckpts.prune(keep_last=1) == []
    assert ckpts.store.exists("proj/run/v000001/half")


def test_other_runs_are_not_seen(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "store")
    CheckpointStore(store, "proj", "run-b").write(1, 1, _source(tmp_path))
    other = CheckpointStore(store, "proj", "run")
    assert other.list_versions() == []
    store.put_bytes("proj/run/notes.txt", b"not a version dir")
    assert other.list_versions() == []
