"""The object store contract every backend honours (S3/MinIO, local filesystem).

Owns `ObjectStore` (the abstract interface), `ObjectInfo` (what `stat` and `list` return), the
`ObjectNotFoundError` raised for a missing key, and the key rules shared by all backends. Keys are
relative, '/'-separated paths; each store may sit under a prefix of its bucket or directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, cast

import numpy as np

from rft.errors import StorageError

#: Bytes moved per read/write step when streaming objects; large files never sit in memory whole.
CHUNK_SIZE = 1 << 20


class ReadableStream(Protocol):
    """Anything with `read(size)` returning bytes or a memoryview of bytes (open files, BytesIO,
    hashing wrappers, views over tensors' memory); an empty result is the end."""

    def read(self, size: int = -1, /) -> bytes | memoryview: ...


#: Called with consecutive pieces of an object, in order, as a download fills its buffer
#: (a running digest); a piece is a view into the buffer, valid for as long as the buffer.
PieceSink = Callable[[memoryview], None]


class ObjectSizeError(StorageError):
    """An object is not the size its reader was told to expect: it `held` (bytes, or words
    such as "more than N" when the reader stopped counting) where `expected` bytes were due."""

    def __init__(self, uri: str, held: int | str, expected: int, where: str = "") -> None:
        super().__init__(f"{uri} holds {held} bytes, {expected} expected{where}")
        self.held, self.expected = held, expected


class ObjectNotFoundError(StorageError):
    """The key (or the bucket holding it) does not exist."""


class ObjectExistsError(StorageError):
    """`put_bytes_if_absent` found the key already there; nothing was written."""


@dataclass(frozen=True)
class ObjectInfo:
    """One stored object: its key relative to the store, its size in bytes, its etag and when it
    was last written (seconds since the epoch; None where the call that made it does not say).

    The etag is an opaque change token: equal etags mean unchanged content within one backend,
    but it is not a content hash that can be compared across backends.
    """

    key: str
    size: int
    etag: str
    modified: float | None = None


def new_buffer(size: int) -> memoryview:
    """A writable buffer of `size` bytes for a download to fill. Not zero-filled first (a
    `bytearray` would be: one more pass over every byte of a model's weights)."""
    return memoryview(cast(Any, np.empty(size, dtype=np.uint8)))


def download_buffer(size: int, into: memoryview | None) -> memoryview:
    """`into` (a caller's buffer to fill, which must hold exactly `size` writable bytes) as a flat
    byte view, or a new buffer when there is none."""
    if into is None:
        return new_buffer(size)
    view = into.cast("B") if into.format != "B" or into.ndim != 1 else into
    if view.readonly or view.nbytes != size:
        raise StorageError(
            f"a download of {size} bytes cannot fill a {'read-only ' if view.readonly else ''}"
            f"buffer of {view.nbytes}"
        )
    return view


def validate_key(key: str) -> str:
    """Return `key` if it is a clean relative '/'-path, else raise StorageError saying why.

    Rejecting '..', absolute paths and empty segments keeps a key from escaping the store's root or
    prefix, and keeps the filesystem and S3 backends mapping a key to the same object.
    """
    if not isinstance(key, str) or not key:
        raise StorageError(f"object key must be a non-empty string, got {key!r}")
    if key.startswith("/") or key.endswith("/"):
        raise StorageError(f"object key {key!r} must not start or end with '/'")
    if "\\" in key or "\x00" in key:
        raise StorageError(f"object key {key!r} must not contain backslashes or NUL bytes")
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise StorageError(f"object key {key!r} has an empty, '.' or '..' segment")
    return key


def normalize_prefix(prefix: str) -> str:
    """'' or a clean prefix ending in '/' (the form `list` compares keys against)."""
    prefix = prefix.strip("/")
    if not prefix:
        return ""
    validate_key(prefix)
    return prefix + "/"


class ObjectStore(ABC):
    """A flat namespace of immutable-once-written byte objects.

    Writes of one object are atomic: a reader sees the old object, the new one, or none, never a
    part. Use as a context manager so network pools are closed.
    """

    @property
    @abstractmethod
    def base_uri(self) -> str:
        """URI of the store's root, e.g. 's3://bucket/prefix' or 'file:///abs/path'."""

    def uri(self, key: str) -> str:
        """URI naming one key (or a '/'-ended key prefix) inside this store."""
        if key.endswith("/"):
            return f"{self.base_uri.rstrip('/')}/{validate_key(key.rstrip('/'))}/"
        return f"{self.base_uri.rstrip('/')}/{validate_key(key)}"

    @abstractmethod
    def ensure_bucket(self) -> None:
        """Create the bucket (or root directory) if it does not exist yet."""

    @abstractmethod
    def put_stream(self, key: str, stream: ReadableStream, length: int) -> ObjectInfo:
        """Store exactly `length` bytes read from `stream` under `key`, chunk by chunk."""

    def put_file(self, key: str, path: Path) -> ObjectInfo:
        """Store the file at `path` under `key`, streamed (never read whole into memory)."""
        path = Path(path)
        try:
            size = path.stat().st_size
            handle = path.open("rb")
        except OSError as exc:
            raise StorageError(f"cannot read {path} to upload as {self.uri(key)}: {exc}") from exc
        with handle:
            return self.put_stream(key, handle, size)

    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> ObjectInfo:
        """Store `data` under `key`."""

    @abstractmethod
    def put_bytes_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        """Create `key` with `data` only if no object has that key; ObjectExistsError otherwise.

        Of any number of concurrent creators of one key exactly one succeeds, and the object
        appears whole or not at all. It is the commit point of a checkpoint version: two writers
        can never both create one version's manifest.
        """

    @abstractmethod
    def iter_chunks(self, key: str, chunk_size: int = CHUNK_SIZE) -> Generator[bytes, None, None]:
        """Yield the object's bytes in chunks; ObjectNotFoundError if the key does not exist.

        The error for a missing key is raised on the first `next()`, before any chunk.
        """

    def get_bytes(self, key: str) -> bytes:
        """The whole object in memory (for small objects such as manifests)."""
        return b"".join(self.iter_chunks(key))

    def get_into(
        self,
        key: str,
        size: int,
        sink: PieceSink | None = None,
        into: memoryview | None = None,
    ) -> memoryview:
        """The object's bytes in a buffer of exactly `size` bytes: `into` when given (a caller's
        buffer, kept from one download to the next), else a new one (`new_buffer`); `sink` is
        called on its consecutive pieces in order as they arrive (hashing while downloading: no
        second pass).

        ObjectSizeError if the object is shorter or longer than `size`, ObjectNotFoundError if
        it does not exist. This default streams `iter_chunks`; backends read straight into the
        buffer (and the S3 one in parallel ranges).
        """
        view = download_buffer(size, into)
        done = 0
        with contextlib.closing(self.iter_chunks(key)) as chunks:
            for chunk in chunks:
                if done + len(chunk) > size:
                    raise ObjectSizeError(self.uri(key), f"more than {size}", size)
                view[done : done + len(chunk)] = chunk
                if sink is not None:
                    sink(view[done : done + len(chunk)])
                done += len(chunk)
        if done != size:
            raise ObjectSizeError(self.uri(key), done, size)
        return view

    def get_file(self, key: str, path: Path) -> ObjectInfo:
        """Stream the object to `path`, atomically: `path` appears only once complete.

        Returns the info of what was written (size counted while streaming).
        """
        path = Path(path)
        tmp = path.with_name(f".{path.name}.part-{secrets.token_hex(4)}")
        size = 0
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("wb") as out:
                for chunk in self.iter_chunks(key):
                    out.write(chunk)
                    size += len(chunk)
            os.replace(tmp, path)
        except OSError as exc:
            raise StorageError(f"cannot write {self.uri(key)} to {path}: {exc}") from exc
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        return ObjectInfo(key=key, size=size, etag="")

    @abstractmethod
    def stat(self, key: str) -> ObjectInfo:
        """Size and etag of `key`; ObjectNotFoundError if it does not exist."""

    def exists(self, key: str) -> bool:
        """Whether `key` exists (other failures still raise StorageError)."""
        try:
            self.stat(key)
        except ObjectNotFoundError:
            return False
        return True

    @abstractmethod
    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with `prefix` (recursively), sorted by key.

        A missing bucket or root holds no objects: the result is empty, not an error.
        """

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove `key`; removing a missing key is not an error (deletes are idempotent)."""

    def close(self) -> None:
        """Release network pools or handles; the store may not be used afterwards."""
        return None  # the filesystem backend holds nothing open between calls

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
