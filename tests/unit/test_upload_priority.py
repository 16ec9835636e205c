"""Which upload goes first: a deferrable payload's stream waits while an urgent upload runs,
at most `max_wait_s` at a time, and carries the same bytes; the local store flushes an upload
as it writes it, not only at its end."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.storage import LocalObjectStore
from rft.storage.payload import BytesPayload, Sha256Reader
from rft.storage.upload_priority import UploadPriority


def _read_in_thread(priority: UploadPriority) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []
    stream = priority.deferrable(BytesPayload(b"state")).open()
    thread = threading.Thread(target=lambda: got.append(bytes(stream.read(-1))), daemon=True)
    thread.start()
    return thread, got


def test_a_deferrable_read_waits_for_the_urgent_upload_to_end() -> None:
    priority = UploadPriority()
    with priority.urgent():
        thread, got = _read_in_thread(priority)
        thread.join(0.3)
        assert thread.is_alive() and not got
    thread.join(5)
    assert got == [b"state"]
    assert priority.waited_s >= 0.3


def test_a_deferrable_read_waits_until_every_urgent_upload_has_ended() -> None:
    priority = UploadPriority()
    first, second = priority.urgent(), priority.urgent()
    first.__enter__()
    second.__enter__()
    thread, got = _read_in_thread(priority)
    first.__exit__(None, None, None)
    thread.join(0.3)
    assert thread.is_alive()
    second.__exit__(None, None, None)
    thread.join(5)
    assert got == [b"state"]


def test_with_nothing_urgent_a_read_does_not_wait() -> None:
    priority = UploadPriority()
    assert bytes(priority.deferrable(BytesPayload(b"x" * 10)).open().read(-1)) == b"x" * 10
    assert priority.waited_s == 0.0


def test_back_to_back_urgent_uploads_cannot_starve_a_deferrable_one() -> None:
    priority = UploadPriority(max_wait_s=0.05)
    with priority.urgent():
        thread, got = _read_in_thread(priority)
        thread.join(5)
        assert got == [b"state"]  # it went after max_wait_s, though the urgent one still runs


def test_an_urgent_upload_that_raises_still_lets_deferrable_ones_go() -> None:
    priority = UploadPriority()
    with pytest.raises(RuntimeError), priority.urgent():
        raise RuntimeError("upload failed")
    thread, got = _read_in_thread(priority)
    thread.join(5)
    assert got == [b"state"]


@settings(max_examples=30, deadline=None)
@given(data=st.binary(max_size=5000), piece=st.integers(1, 700))
def test_a_deferrable_payload_carries_the_same_bytes(data: bytes, piece: int) -> None:
    payload = UploadPriority().deferrable(BytesPayload(data))
    assert payload.size == len(data)
    reader = Sha256Reader(payload.open())
    read = b"".join(iter(lambda: bytes(reader.read(piece)), b""))
    assert read == data and reader.hexdigest() == hashlib.sha256(data).hexdigest()
    reader.seek(0)  # an upload attempt sent again whole
    assert bytes(reader.read(-1)) == data


def test_the_local_store_flushes_an_upload_as_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushed: list[int] = []
    real = os.fdatasync

    def counted(fd: int) -> None:
        flushed.append(os.fstat(fd).st_size)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counted)
    data = os.urandom(40 << 20)
    LocalObjectStore(tmp_path / "a", sync_every=16 << 20).put_bytes("k", data)
    # every 16 MiB of the 8 MiB pieces, each flush after the bytes before it were written
    assert flushed == [16 << 20, 32 << 20]
    assert (tmp_path / "a" / "k").read_bytes() == data
    flushed.clear()
    LocalObjectStore(tmp_path / "b", sync_every=0).put_bytes("k", data)
    assert flushed == []  # at its end only (fsync)
