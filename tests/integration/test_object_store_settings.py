"""The object store's credentials and region reach the S3 client: the real MinIO accepts the right
access key and refuses a wrong one; the configured region is the one the client signs with."""

from __future__ import annotations

import dataclasses

import pytest

from rft.config.connections import StackSettings
from rft.errors import StorageError
from rft.storage.object_store import S3ObjectStore

pytestmark = pytest.mark.integration


def test_access_key_and_region_are_what_the_client_signs_with(stack: StackSettings, unique: str):
    good = dataclasses.replace(stack.object_store, bucket=unique, region="us-east-1")
    store = S3ObjectStore(good, bucket=unique, prefix="p")
    store.ensure_bucket()
    store.put_bytes("k", b"v")
    assert store.get_bytes("k") == b"v"
    store.close()

    wrong_key = S3ObjectStore(
        dataclasses.replace(good, access_key="not-the-key"), bucket=unique, prefix="p"
    )
    with pytest.raises(StorageError):
        wrong_key.get_bytes("k")
    wrong_key.close()

    # the region signs every request; the local MinIO sets no site region, so it accepts any
    # and the check here is the client rft builds: the configured region, not a looked-up one
    other_region = S3ObjectStore(
        dataclasses.replace(good, region="ap-south-2"), bucket=unique, prefix="p"
    )
    assert other_region.get_bytes("k") == b"v"
    assert other_region.client._base_url.region == "ap-south-2"
    other_region.close()
