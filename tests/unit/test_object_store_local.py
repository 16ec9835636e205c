"""LocalObjectStore on a real temp directory: key rules, atomic writes, listing, deletes."""

from __future__ import annotations

import errno
import io
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rft.errors import StorageError
from rft.storage import local_object_store
from rft.storage.object_store import LocalObjectStore, ObjectNotFoundError
from rft.storage.object_store_base import CHUNK_SIZE, validate_key

segment = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=12
).filter(lambda s: s not in (".", "..") and not s.startswith(".tmp-"))
keys = st.lists(segment, min_size=1, max_size=4).map("/".join)


@pytest.mark.parametrize(
    "bad", ["", "/abs", "trailing/", "a//b", "a/../b", "..", "./a", "a\\b", "nul\x00"]
)
def test_bad_keys_are_rejected_with_the_key_named(bad: str, tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    with pytest.raises(StorageError) as err:
        store.put_bytes(bad, b"x")
    assert repr(bad) in str(err.value) or "non-empty" in str(err.value)
    assert not any(tmp_path.parent.glob("b"))  # nothing escaped the root


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=keys, data=st.binary(max_size=3000))
def test_put_get_roundtrip(tmp_path: Path, key: str, data: bytes) -> None:
    store = LocalObjectStore(Path(tempfile.mkdtemp(dir=tmp_path)))
    info = store.put_bytes(key, data)
    assert info.key == key and info.size == len(data)
    assert store.get_bytes(key) == data
    assert store.stat(key).size == len(data)
    assert key in [i.key for i in store.list()]
    assert validate_key(key) == key


def test_key_under_an_existing_object_is_a_clear_error(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put_bytes("a", b"1")
    with pytest.raises(StorageError, match="a/b"):
        store.put_bytes("a/b", b"2")
    assert store.get_bytes("a") == b"1"


def test_short_stream_leaves_no_object_and_no_temp_file(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    with pytest.raises(StorageError, match="stream ended after 3 of 10 bytes"):
        store.put_stream("a/b", io.BytesIO(b"abc"), 10)
    assert not store.exists("a/b")
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []


def test_overwrite_replaces_whole_object(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put_bytes("k", b"first version, long")
    store.put_bytes("k", b"second")
    assert store.get_bytes("k") == b"second"


def test_in_flight_temp_files_are_not_listed(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put_bytes("dir/real", b"1")
    (tmp_path / "dir" / ".tmp-real.abcd").write_bytes(b"partial")
    assert [i.key for i in store.list()] == ["dir/real"]


def test_list_matches_string_prefixes_like_s3(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    for key in ["a/b", "a/bc/d", "a/x", "ab", "b"]:
        store.put_bytes(key, b"")
    assert [i.key for i in store.list("a/b")] == ["a/b", "a/bc/d"]
    assert [i.key for i in store.list("a/")] == ["a/b", "a/bc/d", "a/x"]
    assert [i.key for i in store.list("a")] == ["a/b", "a/bc/d", "a/x", "ab"]
    assert store.list("zzz/") == []


def test_missing_root_lists_empty_and_stat_raises_not_found(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "absent")
    assert store.list() == []
    with pytest.raises(ObjectNotFoundError, match="absent"):
        store.stat("x")
    with pytest.raises(ObjectNotFoundError):
        store.get_bytes("x")


def test_directory_is_not_an_object(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put_bytes("d/f", b"1")
    assert not store.exists("d")


def test_delete_is_idempotent_and_prunes_empty_directories(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "root")
    store.put_bytes("a/b/c", b"1")
    store.delete("a/b/c")
    store.delete("a/b/c")
    assert not (tmp_path / "root" / "a").exists()
    assert (tmp_path / "root").is_dir()


def test_get_file_streams_in_chunks_and_is_atomic(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "root")
    data = bytes(range(256)) * (CHUNK_SIZE // 256 * 2 + 3)
    store.put_bytes("big", data)
    chunks = list(store.iter_chunks("big"))
    assert len(chunks) == 3 and max(map(len, chunks)) <= CHUNK_SIZE
    out = tmp_path / "out" / "big.bin"
    assert store.get_file("big", out).size == len(data)
    assert out.read_bytes() == data
    with pytest.raises(ObjectNotFoundError):
        store.get_file("missing", tmp_path / "out" / "missing.bin")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["big.bin"]


def test_uri_names_the_file(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    assert store.uri("a/b") == f"{tmp_path.as_uri()}/a/b"
    assert store.uri("a/") == f"{tmp_path.as_uri()}/a/"


def test_a_put_syncs_its_bytes_and_each_directory_that_gained_a_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What reaches the disk cannot be checked without pulling the power, so this records what
    the real fsync calls were made on, in order, and whether the object had its name then. An
    exclusive create (a commit point) is synced before its name exists; any other object is
    named once its bytes are written and synced after. Either way the put returns only after the
    bytes, the parents of every directory it created and the object's own directory are synced
    (a name not yet synced into its parent can vanish in a power loss)."""
    synced: list[tuple[str, bool]] = []
    real_fsync = os.fsync
    watched = tmp_path / "v1/files/a.bin"

    def recording_fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        synced.append((str(path.relative_to(tmp_path)), watched.exists()))
        real_fsync(fd)

    monkeypatch.setattr(local_object_store.os, "fsync", recording_fsync)
    store = LocalObjectStore(tmp_path)

    store.put_bytes_if_absent("v1/files/a.bin", b"manifest")
    assert synced[0][0].startswith("v1/files/.tmp-a.bin.") and synced[0][1] is False
    assert synced[1:] == [(".", True), ("v1", True), ("v1/files", True)]

    synced.clear()
    watched.unlink()
    store.put_bytes("v1/files/a.bin", b"weights")
    assert synced == [("v1/files/a.bin", True), ("v1/files", True)]  # no new directory now
    assert store.get_bytes("v1/files/a.bin") == b"weights"


def test_a_put_that_fails_to_sync_leaves_no_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A named object whose bytes could not be synced is taken away again: a put that raised
    leaves nothing under the key. The disk's failure is stood in for by the error it gives."""

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    store = LocalObjectStore(tmp_path)
    monkeypatch.setattr(local_object_store.os, "fsync", failing_fsync)
    with pytest.raises(StorageError, match="cannot write"):
        store.put_bytes("v1/a.bin", b"weights")
    monkeypatch.undo()
    assert store.list("") == []
    assert [p.name for p in (tmp_path / "v1").iterdir()] == []
