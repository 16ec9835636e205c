"""Opening an object store from a URI: the backend registry keyed by URI scheme.

`open_object_store("s3://bucket/prefix")`, `open_object_store("file:///abs/dir")` or
`open_object_store(ObjectStoreSettings(...))`. A new backend is one factory function with
`@OBJECT_STORES.register("scheme")`, taking the parsed URI and the S3 settings (endpoint and
credentials, used by network backends only). Also re-exports the store types.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import ParseResult, unquote, urlparse

from rft.config.connections import ObjectStoreSettings
from rft.errors import ConfigError, StorageError
from rft.registry import Registry
from rft.storage.local_object_store import LocalObjectStore
from rft.storage.object_store_base import (
    CHUNK_SIZE,
    ObjectExistsError,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStore,
)
from rft.storage.s3_object_store import S3ObjectStore

__all__ = [
    "CHUNK_SIZE",
    "OBJECT_STORES",
    "LocalObjectStore",
    "ObjectInfo",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "ObjectStore",
    "S3ObjectStore",
    "open_object_store",
]

ObjectStoreFactory = Callable[[ParseResult, ObjectStoreSettings], ObjectStore]

#: URI scheme -> factory(parsed_uri, settings) -> ObjectStore
OBJECT_STORES: Registry[ObjectStoreFactory] = Registry("object store URI scheme")


@OBJECT_STORES.register("s3")
def _open_s3(uri: ParseResult, settings: ObjectStoreSettings) -> ObjectStore:
    if not uri.netloc:
        raise StorageError(f"object store URI {uri.geturl()!r} names no bucket (s3://bucket/...)")
    return S3ObjectStore(settings, bucket=uri.netloc, prefix=unquote(uri.path))


@OBJECT_STORES.register("file")
def _open_file(uri: ParseResult, settings: ObjectStoreSettings) -> ObjectStore:
    if uri.netloc not in ("", "localhost"):
        raise StorageError(
            f"object store URI {uri.geturl()!r}: file URIs must be local (file:///abs/path)"
        )
    if not uri.path:
        raise StorageError(f"object store URI {uri.geturl()!r} names no directory")
    return LocalObjectStore(Path(unquote(uri.path)))


def open_object_store(
    target: str | ObjectStoreSettings, settings: ObjectStoreSettings | None = None
) -> ObjectStore:
    """An object store for a URI ('s3://bucket/prefix', 'file:///dir') or for S3 settings.

    For URIs of network backends, `settings` supplies endpoint and credentials (defaults: the
    local stack's, from the environment). The store opens no connection until first used.
    """
    if isinstance(target, ObjectStoreSettings):
        return S3ObjectStore(target)
    if not isinstance(target, str) or not target:
        raise StorageError(f"object store target must be a URI or ObjectStoreSettings: {target!r}")
    parsed = urlparse(target)
    try:
        factory = OBJECT_STORES.get(parsed.scheme.lower())
    except ConfigError as exc:
        raise ConfigError(
            f"object store URI {target!r}: {exc} (write e.g. s3://bucket/prefix or file:///dir)"
        ) from exc
    return factory(parsed, settings if settings is not None else ObjectStoreSettings())
