"""What a checkpoint file is before it is stored, and the sha256 taken while it moves.

A `Payload` is one file of a version: its size and a stream that reads it from the start, from
a local file (`FilePayload`), bytes in memory (`BytesPayload`) or any other source that can say
its size up front (the trainer's tensors, rft.engines.weights). The digests are taken over the
bytes as they move, never in a pass of their own: `Sha256Reader` while an upload reads its
stream, `Sha256Sink` while a download fills its buffer, both on a thread of their own so that
the next piece's transfer overlaps this piece's digest.
"""

from __future__ import annotations

import hashlib
import io
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from rft.storage.object_store_base import ReadableStream


class Payload(Protocol):
    """One file to store: `size` bytes, read from the start by each `open()`."""

    @property
    def size(self) -> int: ...

    def open(self) -> ReadableStream: ...


class BytesPayload:
    """A file held in memory (JSON state, a serialized optimizer); read without a copy."""

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self._data = memoryview(data).cast("B")

    @property
    def size(self) -> int:
        return self._data.nbytes

    def open(self) -> ReadableStream:
        return _ViewReader(self._data)


class FilePayload:
    """A local file, streamed (never read whole into memory)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._size = path.stat().st_size

    @property
    def size(self) -> int:
        return self._size

    def open(self) -> ReadableStream:
        return self.path.open("rb")


class _ViewReader:
    """Reads a memoryview in slices (views, not copies); can go back to its start."""

    def __init__(self, data: memoryview) -> None:
        self._data = data
        self._at = 0

    def read(self, size: int = -1, /) -> memoryview:
        end = self._data.nbytes if size < 0 else min(self._data.nbytes, self._at + size)
        piece = self._data[self._at : end]
        self._at = end
        return piece

    def seek(self, offset: int, whence: int = 0, /) -> int:
        if whence != io.SEEK_SET:
            raise ValueError("a view reader seeks from its start only")
        self._at = offset
        return offset

    def close(self) -> None:
        return None


class Sha256Reader:
    """Wraps a stream: counts the bytes as the uploader reads them and hashes them (one pass)
    on a thread of its own (`Sha256Sink`), so the digest overlaps the sending. The stream's
    pieces must stay unchanged until `hexdigest()` (bytes read from a file, views of tensors
    that the upload holds still)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self._sink = Sha256Sink()
        self.size = 0

    def read(self, size: int = -1, /) -> bytes | memoryview:
        chunk: bytes | memoryview = self._handle.read(size)
        if len(chunk):
            self._sink(memoryview(chunk))
        self.size += len(chunk)
        return chunk

    def seek(self, offset: int, whence: int = 0, /) -> int:
        """Back to the start only (an upload attempt that failed is sent again whole): the
        hash and the count start over with it."""
        if (offset, whence) != (0, 0):
            raise ValueError("a hashing reader can only go back to its start")
        self._handle.seek(0)
        self._sink.close()
        self._sink = Sha256Sink()
        self.size = 0
        return 0

    def hexdigest(self) -> str:
        """The sha256 of every byte read (waits for the last piece's digest)."""
        return self._sink.hexdigest()


class Sha256Sink:
    """sha256 of pieces handed over in order (`ObjectStore.get_into`'s sink), digested on one
    thread of its own; a piece must stay unchanged until `hexdigest()`, as a download's
    buffer does. At most `_IN_FLIGHT_BYTES` wait (or one piece, if larger): a producer faster
    than the digest waits for it rather than piling pieces up in memory."""

    _IN_FLIGHT_BYTES = 64 << 20

    def __init__(self) -> None:
        self._sha256 = hashlib.sha256()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sha256")
        self._room = threading.Condition()
        self._waiting = 0  # bytes handed over and not yet digested

    def __call__(self, piece: memoryview) -> None:
        size = piece.nbytes
        with self._room:
            self._room.wait_for(
                lambda: not self._waiting or self._waiting + size <= self._IN_FLIGHT_BYTES
            )
            self._waiting += size
        future = self._thread.submit(self._sha256.update, piece)
        future.add_done_callback(lambda _: self._digested(size))

    def _digested(self, size: int) -> None:
        with self._room:
            self._waiting -= size
            self._room.notify_all()

    def hexdigest(self) -> str:
        """The digest of every piece handed over (waits for the last)."""
        self._thread.shutdown(wait=True)
        return self._sha256.hexdigest()

    def close(self) -> None:
        """Stop without a digest (the transfer failed); pieces not yet digested are dropped."""
        self._thread.shutdown(wait=False, cancel_futures=True)
