"""How the confluent producer names a failed flush, without a broker: the client has reported a
fenced producer as a bare SystemError with no cause (seen once in a CI run), and the fatal error
its error callback recorded must still make that a ProducerFencedError."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from rft.config.connections import KafkaSettings
from rft.errors import TransportError
from rft.events.kafka_confluent import ConfluentRecordProducer
from rft.events.transport import ProducerFencedError

BARE = "<method 'flush' of 'cimpl.Producer' objects> returned NULL without setting an exception"


def producer() -> ConfluentRecordProducer:
    return ConfluentRecordProducer(KafkaSettings(), transactional_id="tx-run", config=None)


@pytest.mark.parametrize(
    "code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH]
)
def test_a_bare_system_error_after_a_fencing_callback_is_a_fence(code: int) -> None:
    writer = producer()
    writer._on_error(KafkaError(code, "fenced by newer producer instance", fatal=True))
    with pytest.raises(ProducerFencedError, match="fenced: another process started with"):
        writer._raise_flush_error(SystemError(BARE))


def test_a_fence_carried_by_the_exception_wins_without_a_callback() -> None:
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    with pytest.raises(ProducerFencedError):
        producer()._raise_flush_error(fenced)


def test_a_bare_system_error_with_another_fatal_error_names_that_error() -> None:
    writer = producer()
    writer._on_error(KafkaError(KafkaError._INCONSISTENT, "sequence desynchronised", fatal=True))
    with pytest.raises(TransportError, match="_INCONSISTENT") as err:
        writer._raise_flush_error(SystemError(BARE))
    assert not isinstance(err.value, ProducerFencedError)


def test_a_bare_system_error_with_nothing_recorded_keeps_its_own_text() -> None:
    with pytest.raises(TransportError, match="returned NULL") as err:
        producer()._raise_flush_error(SystemError(BARE))
    assert not isinstance(err.value, ProducerFencedError)
