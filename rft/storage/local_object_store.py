"""Object store on the local filesystem: one file per key under a root directory.

Writes go to a hidden temp file in the target directory and are renamed into place, so a process
that dies mid-write never leaves a half-written object under its real name (what a power loss
can leave is in `_write`). A put returns once the file and the names leading to it are on the
disk (the file and each directory that gained an entry), so a version announced after its
manifest's put keeps that manifest through a power loss. Used for tests, single-machine runs
and as the `file://` backend.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
from collections.abc import Generator
from pathlib import Path

from rft.errors import StorageError
from rft.storage.object_store_base import (
    CHUNK_SIZE,
    ObjectExistsError,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectSizeError,
    ObjectStore,
    PieceSink,
    ReadableStream,
    download_buffer,
    validate_key,
)

# Temp files are named with this prefix; `list` hides them so an in-flight write is invisible.
_TEMP_PREFIX = ".tmp-"
# Bytes per `readinto` of `get_into` and per write of an upload: big enough that a digest of each
# piece runs at full speed and that a transfer takes the interpreter lock rarely (beside a
# training step's Python thread, every piece waits for it: bench/store_put.py --busy), small
# enough that the digest of one overlaps the transfer of the next.
_PIECE = 8 << 20
# An upload flushes its file to the disk every so many bytes, not only at its end: written
# whole into the page cache first, a large file's pages pass the kernel's dirty limit and every
# writer on the disk is throttled until they drain. A version's weights written beside a
# training state then took as long as the state (rft.storage.upload_priority).
SYNC_EVERY = 64 << 20


def _missing_dirs(directory: Path, root: Path) -> list[Path]:
    """The directories from `directory` up to (not including) `root` that do not exist yet,
    outermost first: the ones a put will create, whose names live in their parents."""
    missing: list[Path] = []
    while directory != root and root in directory.parents and not directory.exists():
        missing.append(directory)
        directory = directory.parent
    return missing[::-1]


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalObjectStore(ObjectStore):
    """Keys map to `root/<key>`; the directory tree is created on demand.

    Unlike S3, a filesystem cannot hold both 'a' and 'a/b': writing the second raises
    StorageError naming the key. Checkpoint layouts never need both.
    """

    def __init__(self, root: Path | str, sync_every: int = SYNC_EVERY) -> None:
        self.root = Path(root).expanduser().absolute()
        self.sync_every = sync_every  # bytes between flushes of an upload; 0: at its end only

    def __repr__(self) -> str:
        return f"LocalObjectStore({str(self.root)!r})"

    @property
    def base_uri(self) -> str:
        return self.root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*validate_key(key).split("/"))

    def ensure_bucket(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create store root {self.root}: {exc}") from exc

    def put_stream(self, key: str, stream: ReadableStream, length: int) -> ObjectInfo:
        return self._write(key, stream, length, exclusive=False)

    def put_bytes_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        return self._write(key, io.BytesIO(data), len(data), exclusive=True)

    def _write(
        self, key: str, stream: ReadableStream, length: int, *, exclusive: bool
    ) -> ObjectInfo:
        """Write to a temp file, then move it into place: `os.replace` overwrites; `os.link`
        (exclusive) fails if the name exists, the same O_EXCL guarantee, and the object still
        appears whole.

        The two differ in when the bytes are synced. An exclusive create is how rft commits (a
        checkpoint's manifest, a stage's record): it is synced before its name exists, so whoever
        sees the name sees it durable. Any other object is named as soon as its bytes are all
        written and synced after, before the put returns: a checkpoint's files are trusted only
        against the sha256 their manifest records, and the explorer's prefetch
        (rft.storage.checkpoint_prefetch) can read and hash them while the disk takes them,
        which at SmolLM2's size is most of the upload. A power loss in that window can leave a
        named file short; it belongs to a version with no manifest, void, and is never read
        against one."""
        path = self._path(key)
        tmp = path.with_name(f"{_TEMP_PREFIX}{path.name}.{secrets.token_hex(4)}")
        written = unsynced = 0
        named = False
        try:
            created = _missing_dirs(path.parent, self.root)
            path.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("wb") as out:
                while written < length:
                    chunk = stream.read(min(_PIECE, length - written))
                    if not chunk:
                        break
                    out.write(chunk)
                    written += len(chunk)
                    unsynced += len(chunk)
                    if self.sync_every and unsynced >= self.sync_every:
                        out.flush()
                        os.fdatasync(out.fileno())
                        unsynced = 0
                out.flush()
                if written != length:
                    raise StorageError(
                        f"upload of {self.uri(key)}: stream ended after {written} of {length} bytes"
                    )
                if exclusive:
                    os.fsync(out.fileno())
                    try:
                        os.link(tmp, path)
                    except FileExistsError as exc:
                        raise ObjectExistsError(
                            f"{self.uri(key)} already exists (file {path})"
                        ) from exc
                else:
                    os.replace(tmp, path)
                    named = True
                    os.fsync(out.fileno())
            # A rename or a new directory is an entry in its parent, on the disk only once the
            # parent is synced: without this a power loss could drop a name the put returned.
            for directory in dict.fromkeys([*(d.parent for d in created), path.parent]):
                _sync_dir(directory)
        except OSError as exc:
            if named:  # named but not durable: no failed put leaves an object behind
                with contextlib.suppress(OSError):
                    path.unlink()
            raise StorageError(f"cannot write {self.uri(key)} at {path}: {exc}") from exc
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        return self.stat(key)

    def put_bytes(self, key: str, data: bytes) -> ObjectInfo:
        return self.put_stream(key, io.BytesIO(data), len(data))

    def iter_chunks(self, key: str, chunk_size: int = CHUNK_SIZE) -> Generator[bytes, None, None]:
        path = self._path(key)
        try:
            handle = path.open("rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise ObjectNotFoundError(f"no object {self.uri(key)} (file {path})") from exc
        except OSError as exc:
            raise StorageError(f"cannot read {self.uri(key)} at {path}: {exc}") from exc
        with handle:
            while True:
                try:
                    chunk = handle.read(chunk_size)
                except OSError as exc:
                    raise StorageError(f"cannot read {self.uri(key)} at {path}: {exc}") from exc
                if not chunk:
                    return
                yield chunk

    def get_into(
        self,
        key: str,
        size: int,
        sink: PieceSink | None = None,
        into: memoryview | None = None,
    ) -> memoryview:
        """Read the file straight into the buffer (`readinto`: no chunk copies), in pieces
        handed to `sink` as each lands."""
        path = self._path(key)
        view = download_buffer(size, into)
        try:
            handle = path.open("rb", buffering=0)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise ObjectNotFoundError(f"no object {self.uri(key)} (file {path})") from exc
        except OSError as exc:
            raise StorageError(f"cannot read {self.uri(key)} at {path}: {exc}") from exc
        done = 0
        with handle:
            try:
                actual = os.fstat(handle.fileno()).st_size
                if actual != size:
                    raise ObjectSizeError(self.uri(key), actual, size, f" (file {path})")
                while done < size:
                    got = handle.readinto(view[done : done + _PIECE])
                    if not got:
                        raise ObjectSizeError(
                            self.uri(key), f"{done} readable", size, f" (file {path} ended)"
                        )
                    if sink is not None:
                        sink(view[done : done + got])
                    done += got
            except OSError as exc:
                raise StorageError(f"cannot read {self.uri(key)} at {path}: {exc}") from exc
        return view

    def stat(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise ObjectNotFoundError(f"no object {self.uri(key)} (file {path})") from exc
        except OSError as exc:
            raise StorageError(f"cannot stat {self.uri(key)} at {path}: {exc}") from exc
        if not path.is_file():
            raise ObjectNotFoundError(f"no object {self.uri(key)}: {path} is a directory")
        return ObjectInfo(key, st.st_size, f"{st.st_size:x}-{st.st_mtime_ns:x}", st.st_mtime)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        # Walk only the deepest directory the prefix names fully, then filter by string prefix,
        # matching S3 semantics where 'a/b' also matches 'a/bc/d'.
        clean = prefix.lstrip("/")
        dir_part = clean.rsplit("/", 1)[0] if "/" in clean else ""
        start = self.root.joinpath(*validate_key(dir_part).split("/")) if dir_part else self.root
        if not start.is_dir():
            return []
        found: list[ObjectInfo] = []
        try:
            for dirpath, _dirnames, filenames in os.walk(start):
                rel_dir = Path(dirpath).relative_to(self.root).as_posix()
                for filename in filenames:
                    if filename.startswith(_TEMP_PREFIX):
                        continue
                    key = filename if rel_dir == "." else f"{rel_dir}/{filename}"
                    if key.startswith(clean):
                        try:
                            st = (Path(dirpath) / filename).stat()
                        except FileNotFoundError:
                            continue  # deleted while listing
                        found.append(
                            ObjectInfo(
                                key, st.st_size, f"{st.st_size:x}-{st.st_mtime_ns:x}", st.st_mtime
                            )
                        )
        except OSError as exc:
            raise StorageError(f"cannot list {self.base_uri}/{clean}: {exc}") from exc
        return sorted(found, key=lambda info: info.key)

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot delete {self.uri(key)} at {path}: {exc}") from exc
        self._prune_empty_dirs(path.parent)

    def _prune_empty_dirs(self, directory: Path) -> None:
        # S3 has no directories; removing emptied ones keeps both backends listing the same keys.
        while directory != self.root and self.root in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent
