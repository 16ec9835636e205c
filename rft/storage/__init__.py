"""Object stores (S3/MinIO and local filesystem) and the versioned checkpoint store on top.

Open a store with `open_object_store(uri_or_settings)`; keep model versions with
`CheckpointStore(store, project, name)`.
"""

from rft.storage.checkpoint_manifest import CheckpointManifest, ConsumedOffset, ManifestFile
from rft.storage.checkpoint_store import BASE_VERSION, CheckpointStore
from rft.storage.object_store import (
    OBJECT_STORES,
    LocalObjectStore,
    ObjectExistsError,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStore,
    S3ObjectStore,
    open_object_store,
)

__all__ = [
    "BASE_VERSION",
    "OBJECT_STORES",
    "CheckpointManifest",
    "CheckpointStore",
    "ConsumedOffset",
    "LocalObjectStore",
    "ManifestFile",
    "ObjectInfo",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "ObjectStore",
    "S3ObjectStore",
    "open_object_store",
]
