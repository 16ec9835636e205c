"""Object store on S3-compatible storage (MinIO locally) through the `minio` SDK.

This is the only module that imports `minio`. The client and its HTTP pool are created on first
use; every client error (S3 error responses, refused connections, timeouts) leaves this module as
a StorageError naming the bucket and key. Closing the store (or leaving its `with`) clears the pool.

While the endpoint does not answer (refused or dropped connections, 5xx responses), each call is
retried inside the outage window of `stack.object_store.outage_timeout`: an upload starts again
from the beginning of its stream (an S3 PUT is all or nothing, so a failed one left nothing), a
download resumes at the byte it stopped at. Past the window the call raises OutageError.

Big objects move in parts, several at a time: an upload is a multipart upload of `_PART_SIZE`
parts sent by `_PARALLEL` threads (the SDK's own), and `get_into` fetches `_PART_SIZE` byte
ranges by `_PARALLEL` threads straight into one buffer, handing each range to the caller's sink
in order as soon as it and all before it are in (a digest runs while later ranges download).
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO, NoReturn, TypeVar, cast

import urllib3
from minio import Minio
from minio.error import MinioException, S3Error, ServerError
from urllib3.exceptions import HTTPError as Urllib3Error

from rft.config.connections import ObjectStoreSettings
from rft.errors import StorageError
from rft.stack.outage_window import OutageWindow
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
    normalize_prefix,
    validate_key,
)

T = TypeVar("T")

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "NoSuchObject", "ResourceNotFound"})
_BUCKET_TAKEN_CODES = frozenset({"BucketAlreadyOwnedByYou", "BucketAlreadyExists"})
# A conditional PUT that lost: 412 when the key exists, 409 when another conditional write of the
# same key is in flight (S3 and MinIO both answer so).
_EXISTS_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})

# Short connect timeout so an absent endpoint fails fast; generous read timeout for big objects.
_TIMEOUT = urllib3.Timeout(connect=5.0, read=120.0)
# Retry transient server errors a few times, but not connection refusals for long.
_RETRIES = urllib3.Retry(
    total=3, connect=1, backoff_factor=0.2, status_forcelist=(500, 502, 503, 504)
)


# Multipart uploads and ranged downloads: parts this big, this many in flight. 16 MiB parts keep
# the per-request overhead small next to the bytes; four streams fill a local or LAN link.
_PART_SIZE = 16 << 20
_PARALLEL = 4
_CONTENT_RANGE = re.compile(r"bytes \d+-\d+/(\d+)")


class _BytesStream:
    """The SDK reads a part with `read(part size)` and wants `bytes`, gluing short reads
    together with `+=` (a copy each time): pieces are gathered here and joined once."""

    def __init__(self, stream: ReadableStream) -> None:
        self._stream = stream

    def read(self, size: int = -1, /) -> bytes:
        pieces: list[bytes | memoryview] = []
        got = 0
        while size < 0 or got < size:
            piece = self._stream.read(-1 if size < 0 else size - got)
            if not len(piece):
                break
            pieces.append(piece)
            got += len(piece)
        if len(pieces) == 1 and isinstance(pieces[0], bytes):
            return pieces[0]
        return b"".join(pieces)

    def seek(self, offset: int, whence: int = 0, /) -> int:
        seek = getattr(self._stream, "seek", None)
        if seek is None:
            raise io.UnsupportedOperation("the stream cannot go back")
        return int(seek(offset, whence))


def _unanswered(exc: Exception) -> bool:
    """A failure of the endpoint itself (no connection, a dropped one, a 5xx): worth retrying.
    S3 error responses (no such key, access denied) and bad arguments are answers, not outages."""
    if isinstance(exc, S3Error | ValueError):
        return False
    if isinstance(exc, ServerError):
        return exc.status_code >= 500
    return isinstance(exc, Urllib3Error | OSError)


def _rewind(stream: ReadableStream, uri: str) -> None:
    """Back to the stream's start for another upload attempt; a stream that cannot go back
    cannot be uploaded again."""
    seek = getattr(stream, "seek", None)
    if seek is None:
        raise StorageError(f"upload of {uri} failed and its stream cannot be read again")
    seek(0)


def _split_endpoint(endpoint: str, secure: bool) -> tuple[str, bool]:
    """'http://host:port' or 'host:port' -> ('host:port', secure); the SDK wants no scheme."""
    if endpoint.startswith("https://"):
        return endpoint[len("https://") :].rstrip("/"), True
    if endpoint.startswith("http://"):
        return endpoint[len("http://") :].rstrip("/"), False
    return endpoint.rstrip("/"), secure


class S3ObjectStore(ObjectStore):
    """Keys map to `<prefix><key>` in `settings.bucket` (or the `bucket` given here)."""

    def __init__(
        self,
        settings: ObjectStoreSettings,
        *,
        bucket: str | None = None,
        prefix: str = "",
    ) -> None:
        self.settings = settings
        self.bucket = bucket or settings.bucket
        self.prefix = normalize_prefix(prefix)
        self.endpoint, self.secure = _split_endpoint(settings.endpoint, settings.secure)
        self._pool: urllib3.PoolManager | None = None
        self._client: Minio | None = None
        self._client_lock = threading.Lock()
        self.window = OutageWindow(
            "object store",
            self.endpoint,
            settings.outage_timeout,
            "stack.object_store.outage_timeout",
        )

    def __repr__(self) -> str:
        return f"S3ObjectStore(endpoint={self.endpoint!r}, uri={self.base_uri!r})"

    @property
    def base_uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    @property
    def client(self) -> Minio:
        """The SDK client, created on first use (once, though several transfers may ask)."""
        with self._client_lock:
            return self._client if self._client is not None else self._create_client()

    def _create_client(self) -> Minio:
        # a checkpoint moves several files at once, each in _PARALLEL parts
        self._pool = urllib3.PoolManager(timeout=_TIMEOUT, retries=_RETRIES, maxsize=32)
        try:
            self._client = Minio(
                self.endpoint,
                access_key=self.settings.access_key,
                secret_key=self.settings.secret_key,
                secure=self.secure,
                region=self.settings.region,
                http_client=self._pool,
            )
        except (ValueError, MinioException) as exc:
            raise StorageError(
                f"invalid S3 endpoint {self.settings.endpoint!r} for {self.base_uri}: {exc}"
            ) from exc
        return self._client

    def close(self) -> None:
        if self._pool is not None:
            self._pool.clear()
        self._pool = None
        self._client = None

    def _object_name(self, key: str) -> str:
        return self.prefix + validate_key(key)

    def _fail(self, exc: Exception, action: str, key: str | None) -> NoReturn:
        where = self.uri(key) if key else f"s3://{self.bucket}"
        where += f" at {'https' if self.secure else 'http'}://{self.endpoint}"
        if isinstance(exc, S3Error):
            detail = f"{exc.code}: {exc.message}"
            if exc.code in _NOT_FOUND_CODES:
                raise ObjectNotFoundError(f"no object {where} ({detail})") from exc
        else:
            detail = f"{type(exc).__name__}: {exc}"
        raise StorageError(f"{action} {where} failed: {detail}") from exc

    def _call(self, action: str, key: str | None, fn: Callable[[], T]) -> T:
        where = self.uri(key) if key else f"s3://{self.bucket}"
        try:
            return self.window.call(f"{action} {where}", fn, _unanswered)
        except (MinioException, Urllib3Error, OSError, ValueError) as exc:
            self._fail(exc, action, key)

    def ensure_bucket(self) -> None:
        client = self.client
        if self._call("checking bucket", None, lambda: client.bucket_exists(self.bucket)):
            return
        try:
            self.window.call(
                f"creating bucket s3://{self.bucket}",
                lambda: client.make_bucket(self.bucket, location=self.settings.region),
                _unanswered,
            )
        except S3Error as exc:
            if exc.code in _BUCKET_TAKEN_CODES:
                return  # another process created it first
            self._fail(exc, "creating bucket", None)
        except (MinioException, Urllib3Error, OSError, ValueError) as exc:
            self._fail(exc, "creating bucket", None)

    def put_stream(self, key: str, stream: ReadableStream, length: int) -> ObjectInfo:
        name = self._object_name(key)
        client = self.client
        attempts = 0

        def upload() -> Any:
            nonlocal attempts
            if attempts:
                _rewind(stream, self.uri(key))
            attempts += 1
            return client.put_object(
                self.bucket,
                name,
                cast(BinaryIO, reader),
                length,
                part_size=_PART_SIZE,
                num_parallel_uploads=_PARALLEL,
            )

        reader = _BytesStream(stream)

        result = self._call("upload of", key, upload)
        return ObjectInfo(key=key, size=length, etag=str(result.etag or ""))

    def put_bytes(self, key: str, data: bytes) -> ObjectInfo:
        return self.put_stream(key, io.BytesIO(data), len(data))

    def put_bytes_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        name = self._object_name(key)
        client = self.client
        # `put_object` treats unknown headers as user metadata (x-amz-meta-*), so the
        # conditional header goes through the SDK's single-request PUT, which sends them as given.
        headers: dict[str, str | list[str] | tuple[str]] = {
            "If-None-Match": "*",
            "Content-Type": "application/octet-stream",
        }
        try:
            # retried through an outage like every call; a retry that finds its own first
            # attempt's object is told apart by the caller (CheckpointStore compares the bytes)
            result = self.window.call(
                f"conditional upload of {self.uri(key)}",
                lambda: client._put_object(self.bucket, name, data, headers=headers),
                _unanswered,
            )
        except S3Error as exc:
            if exc.code in _EXISTS_CODES:
                raise ObjectExistsError(
                    f"{self.uri(key)} already exists (conditional create refused: {exc.code})"
                ) from exc
            self._fail(exc, "conditional upload of", key)
        except (MinioException, Urllib3Error, OSError, ValueError) as exc:
            self._fail(exc, "conditional upload of", key)
        return ObjectInfo(key=key, size=len(data), etag=str(result.etag or ""))

    def iter_chunks(self, key: str, chunk_size: int = CHUNK_SIZE) -> Generator[bytes, None, None]:
        name = self._object_name(key)
        client = self.client
        done = 0  # bytes handed out: a download cut off resumes after them
        while True:
            response = self._call(
                "download of",
                key,
                lambda at=done: client.get_object(self.bucket, name, offset=at),  # type: ignore[misc]
            )
            try:
                for chunk in response.stream(chunk_size):
                    done += len(chunk)
                    yield chunk
                return
            except (MinioException, Urllib3Error, OSError, ValueError) as exc:
                self._cut_off(exc, key, done)
            finally:
                response.close()
                response.release_conn()

    def _cut_off(self, exc: Exception, key: str, at: int) -> None:
        """A download stopped at byte `at`: an answer (not an outage) fails it; an outage is
        waited out by the next get_object attempt, OutageError past the window."""
        if not _unanswered(exc):
            self._fail(exc, "download of", key)
        self.window.failed(f"download of {self.uri(key)} cut off at byte {at}: {exc}")

    def get_into(
        self,
        key: str,
        size: int,
        sink: PieceSink | None = None,
        into: memoryview | None = None,
    ) -> memoryview:
        view = download_buffer(size, into)
        if size == 0:
            actual = self.stat(key).size
            if actual:
                raise ObjectSizeError(self.uri(key), actual, 0)
            return view
        parts = [(lo, min(size, lo + _PART_SIZE)) for lo in range(0, size, _PART_SIZE)]
        if len(parts) == 1:
            self._get_range(key, view, *parts[0], size)
            if sink is not None:
                sink(view)
            return view
        with ThreadPoolExecutor(_PARALLEL, thread_name_prefix="s3-get") as pool:
            futures: list[Future[None]] = [
                pool.submit(self._get_range, key, view, lo, hi, size) for lo, hi in parts
            ]
            try:
                for (lo, hi), future in zip(parts, futures, strict=True):
                    future.result()
                    if sink is not None:
                        sink(view[lo:hi])
            finally:
                for future in futures:
                    future.cancel()
        return view

    def _get_range(self, key: str, view: memoryview, lo: int, hi: int, size: int) -> None:
        """Bytes [lo, hi) of the object into `view[lo:hi]`; a range cut off by an outage
        resumes at the byte it stopped at. Checks the object's total size (Content-Range)."""
        name = self._object_name(key)
        client = self.client
        at = lo
        while at < hi:
            try:
                response = self._call(
                    "download of",
                    key,
                    lambda at=at: client.get_object(self.bucket, name, offset=at, length=hi - at),  # type: ignore[misc]
                )
            except StorageError as exc:
                cause = exc.__cause__
                if isinstance(cause, S3Error) and cause.code == "InvalidRange":
                    raise ObjectSizeError(self.uri(key), f"fewer than {size}", size) from exc
                raise
            try:
                total = _CONTENT_RANGE.match(str(response.headers.get("Content-Range", "")))
                if total is None or int(total.group(1)) != size:
                    shown = total.group(1) if total else "an unknown number of"
                    raise ObjectSizeError(self.uri(key), shown, size)
                while at < hi:
                    got = response.readinto(view[at:hi])
                    if not got:
                        break
                    at += got
            except (MinioException, Urllib3Error, OSError, ValueError) as exc:
                self._cut_off(exc, key, at)
            finally:
                response.close()
                response.release_conn()

    def stat(self, key: str) -> ObjectInfo:
        name = self._object_name(key)
        client = self.client
        obj = self._call("stat of", key, lambda: client.stat_object(self.bucket, name))
        return ObjectInfo(
            key=key,
            size=int(obj.size or 0),
            etag=str(obj.etag or ""),
            modified=obj.last_modified.timestamp() if obj.last_modified else None,
        )

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        full_prefix = self.prefix + prefix.lstrip("/")
        client = self.client

        def listing() -> list[ObjectInfo]:
            found: list[ObjectInfo] = []  # a listing cut off starts again from the top
            for obj in client.list_objects(self.bucket, prefix=full_prefix, recursive=True):
                name = str(obj.object_name)
                if obj.is_dir or not name.startswith(self.prefix):
                    continue
                found.append(
                    ObjectInfo(
                        key=name[len(self.prefix) :],
                        size=int(obj.size or 0),
                        etag=str(obj.etag or ""),
                        modified=obj.last_modified.timestamp() if obj.last_modified else None,
                    )
                )
            return found

        try:
            found = self.window.call(f"listing {self.base_uri}/{prefix}", listing, _unanswered)
        except S3Error as exc:
            if exc.code == "NoSuchBucket":
                return []
            self._fail(exc, "listing", None)
        except (MinioException, Urllib3Error, OSError, ValueError) as exc:
            self._fail(exc, f"listing prefix {full_prefix!r} of", None)
        return sorted(found, key=lambda info: info.key)

    def delete(self, key: str) -> None:
        name = self._object_name(key)
        client = self.client
        try:
            self.window.call(
                f"delete of {self.uri(key)}",
                lambda: client.remove_object(self.bucket, name),
                _unanswered,
            )
        except S3Error as exc:
            if exc.code in _NOT_FOUND_CODES:
                return
            self._fail(exc, "delete of", key)
        except (MinioException, Urllib3Error, OSError, ValueError) as exc:
            self._fail(exc, "delete of", key)
