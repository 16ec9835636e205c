"""Shared fixtures: `stack` (the real local Kafka + MinIO, started lazily once per session) and
`unique` (a fresh short name per test for topics, buckets and groups).

With RFT_KAFKA_BOOTSTRAP or RFT_S3_ENDPOINT set, `stack` points at that external stack and starts
nothing. Otherwise it runs `LocalStack.up()` on the default root and, at session end, stops what
this session started, unless another live session still holds a lease on the stack or
RFT_STACK_KEEP=1 asks to leave it running.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator

import pytest

from rft.config.connections import StackSettings
from rft.errors import RftError
from rft.events.transport import kafka_backend
from rft.stack import LocalStack, StackLease

EXTERNAL_STACK_ENV = ("RFT_KAFKA_BOOTSTRAP", "RFT_S3_ENDPOINT")


@pytest.fixture(scope="session")
def stack() -> Iterator[StackSettings]:
    if any(os.environ.get(name) for name in EXTERNAL_STACK_ENV):
        yield StackSettings()  # the settings read the external endpoints from the environment
        return
    local = LocalStack()
    lease = StackLease(local.layout.leases).acquire()
    try:
        result = local.up()
        yield local.stack_settings()
    finally:
        lease.release()
    keep = os.environ.get("RFT_STACK_KEEP") == "1"
    if result.started and not keep and not lease.others_alive():
        local.down(result.started)


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> Iterator[str]:
    """Lowercase letters and digits only: valid as a topic, bucket, group or key part.

    After a test on the session stack, the topics whose names hold it are deleted: every partition
    keeps files open and index files mapped in the broker, and a suite's thousand tests would
    otherwise pile up thousands of partitions in one broker (and across runs on the same root).
    """
    name = "t" + uuid.uuid4().hex[:10]
    yield name
    if "stack" in request.fixturenames:
        _delete_topics_holding(request.getfixturevalue("stack"), name)


def _delete_topics_holding(stack: StackSettings, name: str) -> None:
    try:
        with kafka_backend(stack.kafka).admin() as admin:
            doomed = [t for t in admin.list_topics(timeout_s=10.0) if name in t]
            if doomed:
                admin.delete_topics(doomed, timeout_s=30.0)
    except RftError as exc:  # a test that leaves the broker unreachable has failed already
        warnings.warn(f"could not delete the topics of {name}: {exc}", stacklevel=1)
