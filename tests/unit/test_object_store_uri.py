"""Opening stores from URIs and settings; S3 client laziness and error translation (no server)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rft.config.connections import ObjectStoreSettings
from rft.errors import ConfigError, OutageError, StorageError
from rft.storage.object_store import (
    OBJECT_STORES,
    LocalObjectStore,
    ObjectStore,
    S3ObjectStore,
    open_object_store,
)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_s3_uri_gives_bucket_and_prefix() -> None:
    store = open_object_store("s3://models/team/run-1/", ObjectStoreSettings(endpoint="h:1"))
    assert isinstance(store, S3ObjectStore)
    assert store.bucket == "models" and store.prefix == "team/run-1/"
    assert store.base_uri == "s3://models/team/run-1"
    assert store.uri("v000001/manifest.json") == "s3://models/team/run-1/v000001/manifest.json"


def test_settings_give_the_configured_bucket_without_prefix() -> None:
    store = open_object_store(ObjectStoreSettings(endpoint="http://h:9", bucket="ckpt"))
    assert isinstance(store, S3ObjectStore)
    assert (store.bucket, store.prefix, store.endpoint, store.secure) == ("ckpt", "", "h:9", False)
    assert open_object_store(ObjectStoreSettings(endpoint="https://h:9")).secure  # type: ignore[attr-defined]


def test_file_uri_gives_local_store(tmp_path: Path) -> None:
    store = open_object_store(tmp_path.as_uri())
    assert isinstance(store, LocalObjectStore) and store.root == tmp_path


@pytest.mark.parametrize(
    ("uri", "error", "words"),
    [
        ("gs://bucket/x", ConfigError, "gs"),
        ("/plain/path", ConfigError, "/plain/path"),
        ("s3:///no-bucket", StorageError, "no bucket"),
        ("file://remotehost/x", StorageError, "must be local"),
    ],
)
def test_bad_uris_are_named(uri: str, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        open_object_store(uri)


def test_registry_lists_known_schemes_and_takes_new_backends(tmp_path: Path) -> None:
    assert {"s3", "file"} <= set(OBJECT_STORES.names())
    with pytest.raises(ConfigError, match="known: .*file.*s3"):
        open_object_store("mem://x")

    @OBJECT_STORES.register("testmirror")
    def _mirror(uri, settings):  # type: ignore[no-untyped-def]
        return LocalObjectStore(tmp_path / uri.netloc)

    try:
        store: ObjectStore = open_object_store("testmirror://here")
        assert isinstance(store, LocalObjectStore) and store.root == tmp_path / "here"
    finally:
        OBJECT_STORES._entries.pop("testmirror")


def test_s3_client_is_created_lazily_and_an_unreachable_store_names_bucket_and_key() -> None:
    # a zero outage window: the first refused connection ends the call (by default a store that
    # stops answering is retried for stack.object_store.outage_timeout seconds)
    settings = ObjectStoreSettings(
        endpoint=f"127.0.0.1:{_closed_port()}", bucket="ckpt", outage_timeout=0.0
    )
    with S3ObjectStore(settings, prefix="p") as store:
        assert store._client is None  # constructing opened nothing
        with pytest.raises(OutageError) as err:
            store.get_bytes("v000001/model.safetensors")
        message = str(err.value)
        assert "s3://ckpt/p/v000001/model.safetensors" in message
        assert "stack.object_store.outage_timeout" in message
        assert "Connection refused" in message
        with pytest.raises(OutageError, match="s3://ckpt"):
            store.ensure_bucket()
    assert store._client is None  # closed on exit


def test_settings_repr_hides_the_secret() -> None:
    store = S3ObjectStore(ObjectStoreSettings(endpoint="h:1", secret_key="hunter2"))
    assert "hunter2" not in repr(store)
