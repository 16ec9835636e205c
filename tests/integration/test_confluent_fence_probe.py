"""The confluent producer's own way to learn that it was fenced when its client reports a failed
flush with no error attached: a transactional call inside the open transaction, which a healthy
producer refuses without side effects and a fenced one answers with its fatal error."""

from __future__ import annotations

import contextlib
import dataclasses
import time

import pytest

from rft.config.connections import StackSettings
from rft.errors import TransportError
from rft.events.kafka_confluent import _FENCED, ConfluentRecordProducer
from tests.integration.test_transport_contract import make_topic

pytestmark = pytest.mark.integration


def test_probing_an_open_transaction_finds_a_fence_and_changes_nothing_otherwise(
    stack: StackSettings, unique: str
) -> None:
    kafka = dataclasses.replace(stack.kafka, client="confluent")
    topic = make_topic(kafka, f"t.{unique}.probe")
    first = ConfluentRecordProducer(kafka, transactional_id=f"tx-{unique}", config=None)
    first.begin_transaction()
    first.produce(topic, b"kept")
    first.flush(10.0)
    assert first._transaction_fatal_error() is None  # healthy: refused, and nothing changed
    first.commit_transaction()  # the transaction the probe ran inside still commits

    first.begin_transaction()
    first.produce(topic, b"fenced")
    first.flush(10.0)
    second = ConfluentRecordProducer(kafka, transactional_id=f"tx-{unique}", config=None)
    second.begin_transaction()
    second.commit_transaction()
    # the fenced producer learns it from the broker's answer to its next record (which the client
    # may already refuse, raising the fatal error itself)
    with contextlib.suppress(Exception):
        first._client.produce(topic, b"after the fence")  # type: ignore[union-attr]
    deadline = time.monotonic() + 20
    found = None
    while found is None and time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the client may raise the fatal error here too
            first._client.poll(0.2)  # type: ignore[union-attr]
        found = first._transaction_fatal_error()
    assert found is not None and found.code() in _FENCED, found
    second.close()
    with contextlib.suppress(TransportError):  # a fenced producer's close reports the fence
        first.close()
