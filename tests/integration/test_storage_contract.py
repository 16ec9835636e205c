"""One contract, two backends: every ObjectStore and CheckpointStore behaviour is checked on the
local filesystem and on the real MinIO of the `stack` fixture (a unique prefix per test, in a
shared test bucket; bucket creation gets a bucket of its own)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rft.errors import CheckpointError, StorageError
from rft.storage import (
    CheckpointStore,
    LocalObjectStore,
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectStore,
    S3ObjectStore,
)
from rft.storage.checkpoint_gc import collect_orphans, find_orphans, find_strays
from rft.storage.checkpoint_manifest import ManifestFile
from rft.storage.checkpoint_prefetch import VersionPrefetch
from rft.storage.checkpoint_store import PrefetchedFile, VersionTakenError
from rft.storage.object_store_base import CHUNK_SIZE, ObjectSizeError
from rft.storage.payload import BytesPayload, Payload

BACKENDS = ["local", pytest.param("s3", marks=pytest.mark.integration)]
CONTRACT_BUCKET = "rft-contract-tests"


def _bucket_name(text: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", f"rft-t-{text}".lower())[:63].rstrip("-")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if backend == "local":
        with LocalObjectStore(tmp_path / "store") as local:
            local.ensure_bucket()
            yield local
        return
    stack = request.getfixturevalue("stack")
    unique = request.getfixturevalue("unique")
    settings = dataclasses.replace(stack.object_store, bucket=CONTRACT_BUCKET)
    with S3ObjectStore(settings, prefix=f"contract/{unique}") as s3:
        s3.ensure_bucket()
        yield s3
        for info in s3.list():
            s3.delete(info.key)


@pytest.fixture
def fresh_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """A store whose bucket (or root directory) does not exist yet."""
    if backend == "local":
        return LocalObjectStore(tmp_path / "not-yet")
    stack = request.getfixturevalue("stack")
    unique = request.getfixturevalue("unique")
    return S3ObjectStore(
        dataclasses.replace(stack.object_store, bucket=_bucket_name(unique)), prefix="p"
    )


# -- object store ---------------------------------------------------------------------------


def test_put_get_stat_exists(store: ObjectStore) -> None:
    info = store.put_bytes("dir/a.bin", b"alpha")
    assert (info.key, info.size) == ("dir/a.bin", 5)
    assert store.get_bytes("dir/a.bin") == b"alpha"
    stat = store.stat("dir/a.bin")
    assert stat.size == 5 and stat.etag
    assert store.exists("dir/a.bin")
    assert not store.exists("dir/b.bin")
    assert not store.exists("dir")  # a "directory" is not an object


def test_create_if_absent_never_overwrites(store: ObjectStore) -> None:
    store.put_bytes_if_absent("v/manifest.json", b"first")
    with pytest.raises(ObjectExistsError, match=re.escape(store.uri("v/manifest.json"))):
        store.put_bytes_if_absent("v/manifest.json", b"second")
    store.put_bytes("v/plain", b"written unconditionally")
    with pytest.raises(ObjectExistsError):
        store.put_bytes_if_absent("v/plain", b"x")
    assert store.get_bytes("v/manifest.json") == b"first"
    assert store.get_bytes("v/plain") == b"written unconditionally"
    assert [i.key for i in store.list("v/")] == ["v/manifest.json", "v/plain"]  # no temp files
    store.delete("v/manifest.json")
    store.put_bytes_if_absent("v/manifest.json", b"again")  # absent again: creatable again
    assert store.get_bytes("v/manifest.json") == b"again"


def _race(count: int, attempt: Callable[[int], object]) -> tuple[list[int], list[Exception]]:
    """Run `attempt(i)` for i in range(count) in threads released together: (winners, errors)."""
    start = threading.Barrier(count)
    winners: list[int] = []
    errors: list[Exception] = []

    def run(i: int) -> None:
        start.wait()
        try:
            attempt(i)
            winners.append(i)
        except Exception as exc:  # noqa: BLE001 - collected and asserted on below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return winners, errors


def test_concurrent_creators_exactly_one_wins(store: ObjectStore) -> None:
    winners, errors = _race(6, lambda i: store.put_bytes_if_absent("race", b"writer-%d" % i))
    assert len(winners) == 1
    assert len(errors) == 5 and all(isinstance(e, ObjectExistsError) for e in errors)
    assert store.get_bytes("race") == b"writer-%d" % winners[0]


def test_stat_and_list_report_when_an_object_was_written(store: ObjectStore) -> None:
    before = time.time()
    store.put_bytes("w/a", b"a")
    after = time.time()
    listed = store.list("w/")[0].modified
    stated = store.stat("w/a").modified
    for when in (listed, stated):
        # S3 keeps whole seconds; either clock may be a little off the other
        assert when is not None and before - 5 <= when <= after + 5


def test_empty_object(store: ObjectStore) -> None:
    store.put_bytes("empty", b"")
    assert store.get_bytes("empty") == b""
    assert store.stat("empty").size == 0


def test_overwrite_changes_content_and_etag(store: ObjectStore) -> None:
    first = store.put_bytes("k", b"one")
    second = store.put_bytes("k", b"two-two")
    assert store.get_bytes("k") == b"two-two"
    assert store.stat("k").size == 7
    assert store.stat("k").etag != first.etag or first.etag == ""
    assert second.size == 7


def test_list_is_recursive_sorted_and_prefix_filtered(store: ObjectStore) -> None:
    for key in ["b/2", "a/1", "a/sub/3", "ab", "c"]:
        store.put_bytes(key, key.encode())
    assert [i.key for i in store.list()] == ["a/1", "a/sub/3", "ab", "b/2", "c"]
    assert [i.key for i in store.list("a/")] == ["a/1", "a/sub/3"]
    assert [i.key for i in store.list("a")] == ["a/1", "a/sub/3", "ab"]
    assert {i.key: i.size for i in store.list("b")} == {"b/2": 3}
    assert store.list("nothing/") == []


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put_bytes("x/y", b"1")
    store.delete("x/y")
    store.delete("x/y")
    assert not store.exists("x/y")
    assert store.list("x/") == []


def test_missing_key_errors_name_the_key(store: ObjectStore, tmp_path: Path) -> None:
    for action in (
        lambda: store.get_bytes("no/such/key"),
        lambda: store.stat("no/such/key"),
        lambda: store.get_file("no/such/key", tmp_path / "dl" / "f"),
    ):
        with pytest.raises(ObjectNotFoundError, match="no/such/key"):
            action()
    assert not (tmp_path / "dl" / "f").exists()


def test_bad_keys_never_reach_the_backend(store: ObjectStore) -> None:
    for bad in ("../escape", "/abs", "a//b"):
        with pytest.raises(StorageError, match="object key"):
            store.put_bytes(bad, b"x")
    assert store.list() == []


def test_missing_bucket_lists_empty_and_ensure_bucket_creates_it(fresh_store: ObjectStore) -> None:
    with fresh_store:
        assert fresh_store.list() == []
        assert not fresh_store.exists("k")
        fresh_store.ensure_bucket()
        fresh_store.ensure_bucket()  # idempotent
        fresh_store.put_bytes("k", b"v")
        assert fresh_store.get_bytes("k") == b"v"
        fresh_store.delete("k")


def test_large_file_streams_both_ways(store: ObjectStore, tmp_path: Path) -> None:
    size = 20 * 1024 * 1024 + 17  # > the 5 MiB S3 part size: a multipart upload
    src = tmp_path / "big.bin"
    digest = hashlib.sha256()
    with src.open("wb") as out:
        for _ in range(size // CHUNK_SIZE + 1):
            block = os.urandom(min(CHUNK_SIZE, size - out.tell()))
            digest.update(block)
            out.write(block)
    info = store.put_file("big/blob.bin", src)
    assert info.size == size
    assert store.stat("big/blob.bin").size == size
    chunk_sizes = [len(c) for c in store.iter_chunks("big/blob.bin")]
    assert sum(chunk_sizes) == size and max(chunk_sizes) <= CHUNK_SIZE
    dest = tmp_path / "out" / "blob.bin"
    assert store.get_file("big/blob.bin", dest).size == size
    check = hashlib.sha256()
    with dest.open("rb") as fh:
        while block := fh.read(CHUNK_SIZE):
            check.update(block)
    assert check.hexdigest() == digest.hexdigest()


def test_uri_names_the_backend(store: ObjectStore, backend: str) -> None:
    uri = store.uri("v000001/manifest.json")
    assert uri.startswith("file:///" if backend == "local" else "s3://")
    assert uri.endswith("/v000001/manifest.json")


# -- checkpoint store -----------------------------------------------------------------------


def _model_dir(root: Path, seed: int = 0, big: int = 3 * 1024 * 1024) -> Path:
    src = root / f"model-{seed}"
    (src / "tokenizer").mkdir(parents=True)
    (src / "model.safetensors").write_bytes(os.urandom(big))
    (src / "config.json").write_text(f'{{"seed": {seed}}}')
    (src / "tokenizer" / "tokenizer.json").write_text('{"vocab": {}}')
    return src


def _same_tree(a: Path, b: Path) -> bool:
    def files(root: Path) -> dict[str, bytes]:
        return {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in root.rglob("*")
            if p.is_file() and p.name != "manifest.json"
        }

    return files(a) == files(b)


@pytest.fixture
def ckpts(store: ObjectStore) -> CheckpointStore:
    return CheckpointStore(store, "proj", "run")


def test_checkpoint_write_then_download_verified(ckpts: CheckpointStore, tmp_path: Path) -> None:
    src = _model_dir(tmp_path)
    manifest = ckpts.write(
        1,
        train_step=8,
        local_dir=src,
        consumed_offsets=[("proj.run.experiences", 0, 120), ("proj.run.experiences", 1, 96)],
        parent_version=0,
        extra={"algorithm": "grpo"},
    )
    assert ckpts.list_versions() == [1]
    assert ckpts.latest_version() == 1
    assert ckpts.read_manifest(1) == manifest
    assert {f.name: f.size for f in manifest.files} == {
        "config.json": len((src / "config.json").read_bytes()),
        "model.safetensors": 3 * 1024 * 1024,
        "tokenizer/tokenizer.json": 13,
    }
    sha = hashlib.sha256((src / "model.safetensors").read_bytes()).hexdigest()
    assert manifest.file("model.safetensors").sha256 == sha
    dest = ckpts.download(1, tmp_path / "dl" / "v1")
    assert _same_tree(src, dest)
    assert (dest / "manifest.json").exists()
    assert [p.name for p in (tmp_path / "dl").iterdir()] == ["v1"]  # no temp dir left


def test_versions_list_in_order(ckpts: CheckpointStore, tmp_path: Path) -> None:
    for version in (2, 1, 10):
        ckpts.write(version, version, _model_dir(tmp_path, version, big=10))
    assert ckpts.list_versions() == [1, 2, 10]
    assert ckpts.latest_version() == 10


def test_version_without_manifest_is_invisible(ckpts: CheckpointStore, tmp_path: Path) -> None:
    ckpts.write(1, 1, _model_dir(tmp_path, 1, big=10))
    src = _model_dir(tmp_path, 2, big=10)
    # a write that crashed before its manifest: files present, manifest absent
    for path in sorted(src.rglob("*")):
        if path.is_file():
            ckpts.store.put_file(ckpts.version_prefix(2) + path.relative_to(src).as_posix(), path)
    assert ckpts.list_versions() == [1]
    assert ckpts.latest_version() == 1
    with pytest.raises(CheckpointError, match="v2 has no manifest"):
        ckpts.download(2, tmp_path / "dl2")
    assert not (tmp_path / "dl2").exists()
    # the trainer restarting writes the same version again, over the leftovers
    ckpts.write(2, 2, src)
    assert ckpts.latest_version() == 2
    assert _same_tree(src, ckpts.download(2, tmp_path / "dl2"))


def test_manifest_deleted_makes_version_invisible(ckpts: CheckpointStore, tmp_path: Path) -> None:
    ckpts.write(1, 1, _model_dir(tmp_path, 1, big=10))
    ckpts.store.delete(ckpts.version_prefix(1) + "manifest.json")
    assert ckpts.latest_version() == 0
    with pytest.raises(CheckpointError, match="no manifest"):
        ckpts.download(1, tmp_path / "dl")


@pytest.mark.parametrize(
    ("mutation", "words"),
    [
        ("flip", "corrupt: expected sha256"),
        ("truncate", "wrong size: expected 3145728 bytes, got 3145727"),
        ("grow", "wrong size: expected 3145728 bytes, got more than 3145728"),
        ("delete", "listed in the manifest is missing"),
    ],
)
def test_corrupted_object_fails_download_naming_the_file(
    ckpts: CheckpointStore, tmp_path: Path, mutation: str, words: str
) -> None:
    src = _model_dir(tmp_path)
    ckpts.write(1, 1, src)
    key = ckpts.file_key(1, "model.safetensors")
    data = bytearray((src / "model.safetensors").read_bytes())
    if mutation == "flip":
        data[len(data) // 2] ^= 0x01
        ckpts.store.put_bytes(key, bytes(data))
    elif mutation == "truncate":
        ckpts.store.put_bytes(key, bytes(data[:-1]))
    elif mutation == "grow":
        ckpts.store.put_bytes(key, bytes(data) + b"extra")
    else:
        ckpts.store.delete(key)
    with pytest.raises(CheckpointError) as err:
        ckpts.download(1, tmp_path / "dl")
    assert "'model.safetensors'" in str(err.value) and "v1" in str(err.value)
    assert re.search(words, str(err.value))
    assert not (tmp_path / "dl").exists()
    assert list(tmp_path.glob(".dl.partial-*")) == []


def test_corrupted_manifest_is_an_error_naming_its_uri(
    ckpts: CheckpointStore, tmp_path: Path
) -> None:
    ckpts.write(1, 1, _model_dir(tmp_path, 1, big=10))
    key = ckpts.version_prefix(1) + "manifest.json"
    ckpts.store.put_bytes(key, b'{"format": 1, "version": 1')
    with pytest.raises(CheckpointError, match=re.escape(ckpts.store.uri(key))):
        ckpts.download(1, tmp_path / "dl")


def test_written_versions_are_immutable(ckpts: CheckpointStore, tmp_path: Path) -> None:
    ckpts.write(1, 1, _model_dir(tmp_path, 1, big=10))
    with pytest.raises(CheckpointError, match="already exists"):
        ckpts.write(1, 1, _model_dir(tmp_path, 2, big=10))


def test_two_writers_of_one_version_exactly_one_commits(
    ckpts: CheckpointStore, tmp_path: Path
) -> None:
    # same weights, different train steps: the manifest says which writer committed
    src = _model_dir(tmp_path, 1, big=10)
    other = CheckpointStore(ckpts.store, "proj", "run")
    writers = (ckpts, other)
    winners, errors = _race(2, lambda i: writers[i].write(1, 100 + i, src))
    assert len(winners) == 1 and len(errors) == 1
    # the loser saw the manifest before uploading, or lost the conditional create after
    assert isinstance(errors[0], CheckpointError)
    assert "already exists" in str(errors[0]) or isinstance(errors[0], VersionTakenError)
    assert ckpts.read_manifest(1).train_step == 100 + winners[0]
    assert _same_tree(src, ckpts.download(1, tmp_path / "dl"))


def test_manifest_created_by_another_writer_voids_this_write(
    ckpts: CheckpointStore, tmp_path: Path
) -> None:
    once = threading.Lock()  # a version's files go up several at once

    class SlowWriter(CheckpointStore):
        """Another writer commits v1 while this one uploads its files."""

        def _upload(self, version: int, name: str, source: Payload, key: str) -> ManifestFile:
            with once:
                if not ckpts.list_versions():
                    ckpts.write(1, 7, _model_dir(tmp_path, 2, big=10))
            return super()._upload(version, name, source, key)

    slow = SlowWriter(ckpts.store, "proj", "run")
    with pytest.raises(VersionTakenError, match=r"v1: another writer created its manifest first"):
        slow.write(1, 9, _model_dir(tmp_path, 3, big=10))
    assert ckpts.read_manifest(1).train_step == 7  # the first commit stands
    # and its files too: the void writer uploaded all of its own after that commit
    assert _same_tree(tmp_path / "model-2", ckpts.download(1, tmp_path / "dl"))


def test_prune_keeps_the_newest(ckpts: CheckpointStore, tmp_path: Path) -> None:
    for version in (1, 2, 3):
        ckpts.write(version, version, _model_dir(tmp_path, version, big=10))
    assert ckpts.prune(keep_last=1) == [1, 2]
    assert ckpts.list_versions() == [3]
    assert [i.key.split("/")[2] for i in ckpts.store.list("proj/run/")] == ["v000003"] * 4
    assert _same_tree(tmp_path / "model-3", ckpts.download(3, tmp_path / "dl"))


def test_prune_spares_the_versions_live_explorers_hold(
    ckpts: CheckpointStore, tmp_path: Path
) -> None:
    for version in (1, 2, 3, 4, 5):
        ckpts.write(version, version, _model_dir(tmp_path, version, big=10))
    asked: list[int] = []

    def held(versions: set[int] | None) -> Callable[[], set[int] | None]:
        def in_use() -> set[int] | None:
            asked.append(1)
            return versions

        return in_use

    assert ckpts.prune(keep_last=2, in_use=held(None)) == []  # not known: nothing goes
    assert ckpts.prune(keep_last=2, in_use=held({2, 5})) == [1, 3]
    assert ckpts.list_versions() == [2, 4, 5]
    assert len(asked) == 2
    assert ckpts.prune(keep_last=3, in_use=held({2})) == []  # nothing doomed: not even asked
    assert len(asked) == 2
    assert ckpts.prune(keep_last=1, in_use=held(set())) == [2, 4]  # released: pruned
    assert _same_tree(tmp_path / "model-5", ckpts.download(5, tmp_path / "dl"))


def _orphan(ckpts: CheckpointStore, version: int, files: int = 2) -> None:
    for i in range(files):
        ckpts.store.put_bytes(ckpts.version_prefix(version) + f"part-{i}.bin", b"x" * (10 + i))


def test_gc_removes_orphans_older_than_the_ttl_only(ckpts: CheckpointStore, tmp_path: Path) -> None:
    ckpts.write(1, 1, _model_dir(tmp_path, 1, big=10))
    _orphan(ckpts, 2)
    _orphan(ckpts, 3, files=1)
    written = time.time()
    found = find_orphans(ckpts)
    assert [(o.version, o.files, o.size) for o in found] == [(2, 2, 21), (3, 1, 10)]
    assert all(abs(o.newest_write - written) < 10 for o in found)

    # written just now: a write that may be in progress, kept under a one-hour TTL
    collected, kept = collect_orphans(ckpts, 3600.0)
    assert collected == [] and [o.version for o in kept] == [2, 3]
    # an hour and a bit later (the clock given, not waited for): both are old enough
    later = max(o.newest_write for o in found) + 3601
    collected, kept = collect_orphans(ckpts, 3600.0, dry_run=True, now=later)
    assert [o.version for o in collected] == [2, 3] and kept == []
    assert sorted(ckpts.version_objects()) == [1, 2, 3]  # a dry run removes nothing
    collected, _ = collect_orphans(ckpts, 3600.0, now=later)
    assert [o.version for o in collected] == [2, 3]
    assert sorted(ckpts.version_objects()) == [1]  # the version with a manifest is untouched
    assert _same_tree(tmp_path / "model-1", ckpts.download(1, tmp_path / "dl"))


# -- downloads into memory, hashed while they arrive ------------------------------------------


def test_get_into_fills_one_buffer_and_hands_its_pieces_in_order(store: ObjectStore) -> None:
    data = os.urandom(40 * 1024 * 1024 + 17)  # three S3 ranges fetched side by side
    store.put_bytes("big/ranges.bin", data)
    pieces: list[bytes] = []
    buffer = store.get_into("big/ranges.bin", len(data), lambda piece: pieces.append(bytes(piece)))
    assert bytes(buffer) == data
    assert b"".join(pieces) == data  # every byte handed over once, in order
    for wrong in (len(data) - 1, len(data) + 1):
        with pytest.raises(ObjectSizeError, match=re.escape(store.uri("big/ranges.bin"))):
            store.get_into("big/ranges.bin", wrong)
    with pytest.raises(ObjectNotFoundError):
        store.get_into("big/absent.bin", 3)
    store.put_bytes("empty", b"")
    assert bytes(store.get_into("empty", 0)) == b""


def test_get_into_fills_a_callers_buffer_and_refuses_one_of_another_size(
    store: ObjectStore,
) -> None:
    data = os.urandom(20 * 1024 * 1024 + 5)  # two S3 ranges
    store.put_bytes("big/kept.bin", data)
    held = bytearray(len(data))
    got = store.get_into("big/kept.bin", len(data), into=memoryview(held))
    assert bytes(held) == data  # the bytes are in the caller's buffer itself
    assert bytes(got) == data
    for size in (len(data) - 1, len(data) + 1):
        with pytest.raises(StorageError, match=f"cannot fill a buffer of {size}"):
            store.get_into("big/kept.bin", len(data), into=memoryview(bytearray(size)))
    with pytest.raises(StorageError, match="read-only"):
        store.get_into("big/kept.bin", len(data), into=memoryview(bytes(len(data))))


@pytest.mark.parametrize(
    ("mutation", "words"),
    [("flip", "is corrupt: expected sha256"), ("truncate", "wrong size"), ("grow", "wrong size")],
)
def test_read_files_hashes_as_it_downloads_and_names_the_key_of_a_bad_object(
    ckpts: CheckpointStore, tmp_path: Path, mutation: str, words: str
) -> None:
    src = _model_dir(tmp_path, big=20 * 1024 * 1024 + 3)
    manifest = ckpts.write(1, 1, src)
    original = (src / "model.safetensors").read_bytes()
    # the digest taken during the upload is the digest of the bytes (a separate hash agrees)
    assert manifest.file("model.safetensors").sha256 == hashlib.sha256(original).hexdigest()
    _, files = ckpts.read_files(1)
    assert bytes(files["model.safetensors"]) == original
    key = ckpts.file_key(1, "model.safetensors")
    data = bytearray(original)
    if mutation == "flip":
        data[len(data) - 5] ^= 0x01
    elif mutation == "truncate":
        del data[-1]
    else:
        data += b"extra"
    ckpts.store.put_bytes(key, bytes(data))
    with pytest.raises(CheckpointError, match=words) as err:
        ckpts.read_files(1)
    assert ckpts.store.uri(key) in str(err.value) and "'model.safetensors'" in str(err.value)


def test_a_part_written_after_its_version_exists_once_its_listing_does(
    ckpts: CheckpointStore, tmp_path: Path
) -> None:
    ckpts.write(1, 1, _model_dir(tmp_path))
    assert ckpts.read_part(1, "state") is None
    state = os.urandom(2 * 1024 * 1024)
    listing = ckpts.write_part(1, "state", {"state/optimizer.pt": BytesPayload(state)})
    assert listing.file("state/optimizer.pt").sha256 == hashlib.sha256(state).hexdigest()
    found = ckpts.read_part(1, "state")
    assert found is not None and bytes(found[1]["state/optimizer.pt"]) == state
    with pytest.raises(CheckpointError, match="written already"):
        ckpts.write_part(1, "state", {"state/optimizer.pt": BytesPayload(state)})
    # gc counts the part's files as the version's own; the refused write's file is a stray
    strays = find_strays(ckpts)
    assert [s.files for s in strays] == [1]
    assert ckpts.object_key(1, "state/optimizer.pt", listing.extra["object_dir"]) not in (
        strays[0].keys
    )
    assert ckpts.list_versions() == [1]
    ckpts.delete_version(1)
    assert ckpts.store.list(ckpts.version_prefix(1)) == []


# -- prefetch: a version's files fetched while its writer puts them up -----------------------


class _Buffers:
    """A reader's kept buffers, by name and size, that records what a prefetch asked for."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.held = {name: memoryview(bytearray(size)) for name, size in sizes.items()}
        self.asked: list[str] = []
        self.asked_event = threading.Event()

    def __call__(self, name: str, size: int) -> memoryview | None:
        self.asked.append(name)
        self.asked_event.set()
        buffer = self.held.get(name)
        return buffer if buffer is not None and buffer.nbytes == size else None


def _payloads(seed: int, sizes: dict[str, int]) -> dict[str, Payload]:
    return {
        name: BytesPayload(hashlib.sha256(f"{seed}/{name}".encode()).digest() * (size // 32))
        for name, size in sizes.items()
    }


def test_a_prefetch_fetches_a_version_s_files_as_they_land_and_read_files_takes_them(
    ckpts: CheckpointStore,
) -> None:
    sizes = {"model-1.safetensors": 32 * 40_000, "model-2.safetensors": 32 * 70_000}
    buffers = _Buffers({**sizes})
    prefetch = VersionPrefetch(ckpts, 1, buffers)
    files = {**_payloads(1, sizes), "config.json": BytesPayload(b"{}")}
    staged = ckpts.upload(1, 1, None, payloads=files)
    assert buffers.asked_event.wait(10), "the prefetch never saw the staged files"
    ckpts.commit(staged)
    fetched = prefetch.stop()
    # config.json had no buffer: left to the reader; the weights came before the manifest
    assert sorted(fetched) == sorted(sizes) and "config.json" in buffers.asked
    manifest, got = ckpts.read_files(1, prefetched=fetched)
    for name in sizes:
        assert got[name] is fetched[name].data  # taken, not downloaded again
        assert bytes(got[name]) == bytes(files[name].open().read())
        assert fetched[name].sha256 == manifest.file(name).sha256
    assert bytes(got["config.json"]) == b"{}"


def test_a_prefetch_of_a_write_that_never_commits_is_not_taken(ckpts: CheckpointStore) -> None:
    sizes = {"model.safetensors": 32 * 50_000}
    buffers = _Buffers(sizes)
    prefetch = VersionPrefetch(ckpts, 2, buffers)
    ckpts.upload(2, 2, None, payloads=_payloads(0, sizes))  # a writer fenced before its manifest
    assert buffers.asked_event.wait(10)
    winner = _payloads(1, sizes)
    ckpts.write(2, 2, None, payloads=winner)  # another writer's v2, under its own object dir
    fetched = prefetch.stop()
    assert list(fetched) == ["model.safetensors"]  # the void write's file
    _, got = ckpts.read_files(2, prefetched=fetched)
    assert got["model.safetensors"] is not fetched["model.safetensors"].data
    assert bytes(got["model.safetensors"]) == bytes(winner["model.safetensors"].open().read())


def test_a_prefetched_file_the_manifest_does_not_vouch_for_is_downloaded(
    ckpts: CheckpointStore,
) -> None:
    sizes = {"model.safetensors": 32 * 30_000}
    files = _payloads(3, sizes)
    ckpts.write(1, 1, None, payloads=files)
    key = ckpts.file_key(1, "model.safetensors")
    true = ckpts.read_manifest(1).file("model.safetensors").sha256
    wrong = PrefetchedFile(key, sizes["model.safetensors"], "0" * 64, memoryview(bytearray(8)))
    elsewhere = PrefetchedFile(key + ".other", sizes["model.safetensors"], true, wrong.data)
    for early in (wrong, elsewhere):
        _, got = ckpts.read_files(1, prefetched={"model.safetensors": early})
        assert got["model.safetensors"] is not early.data
        assert bytes(got["model.safetensors"]) == bytes(files["model.safetensors"].open().read())
