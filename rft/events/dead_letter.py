"""Parking of records that cannot be decoded: the `dead-letter` topic.

`DeadLetterParker.park(record, error)` writes a DeadLetter event (source topic/partition/offset,
raw bytes, key, headers, error class and message) and logs a warning naming the place. The reader
flushes the parker before it commits the parked record's offset, so a poison record is never read
again forever, and never lost either. A letter that would be over the producer's record size limit
(the payload was near it already) is parked without its payload, saying so; the original stays
in its topic at the offset the letter names.
"""

from __future__ import annotations

import dataclasses
import logging

from rft.errors import BrokerUnavailableError, RecordTooLargeError, TransportError
from rft.events.codec import EventCodec
from rft.events.models import DeadLetter
from rft.events.transport import Record, RecordProducer

log = logging.getLogger(__name__)

SCHEMA_HEADER = "rft-schema"


class DeadLetterParker:
    """Writes undecodable records to one dead-letter topic through its own producer."""

    def __init__(
        self, producer: RecordProducer, topic: str, consumer: str, codec: EventCodec
    ) -> None:
        self._producer = producer
        self.topic = topic
        self._consumer = consumer
        self._codec = codec
        self._unflushed = 0
        self.parked = 0

    def park(self, record: Record, error: BaseException) -> DeadLetter:
        letter = DeadLetter.for_error(
            error,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            payload=record.value or b"",
            consumer=self._consumer,
            key=record.key,
            headers=record.headers,
        )
        headers = [(SCHEMA_HEADER, DeadLetter.SCHEMA.encode())]
        try:
            self._producer.produce(
                self.topic, self._codec.encode(letter), key=record.key, headers=headers
            )
        except RecordTooLargeError:
            letter = without_payload(letter)
            self._producer.produce(
                self.topic, self._codec.encode(letter), key=record.key, headers=headers
            )
        self._unflushed += 1
        self.parked += 1
        log.warning(
            "parked undecodable event %s[%d]@%d in %s: %s: %s",
            record.topic,
            record.partition,
            record.offset,
            self.topic,
            type(error).__name__,
            error,
        )
        return letter

    def flush(self, timeout_s: float = 30.0) -> None:
        """Make every parked event durable; TransportError if the dead-letter topic refused it."""
        if not self._unflushed:
            return
        try:
            self._producer.flush(timeout_s)
        except TransportError as exc:
            # keep the kind: a flush that timed out still holds the records and may be repeated
            error = (
                BrokerUnavailableError
                if isinstance(exc, BrokerUnavailableError)
                else TransportError
            )
            raise error(
                f"could not park {self._unflushed} event(s) in {self.topic}: {exc}"
            ) from exc
        self._unflushed = 0

    def close(self) -> None:
        self._producer.close()


def without_payload(letter: DeadLetter) -> DeadLetter:
    """`letter` with its payload left out, and its message saying so (for a letter that would
    otherwise be over the producer's record size limit)."""
    return dataclasses.replace(
        letter,
        payload=b"",
        error_message=(
            f"{letter.error_message} [payload of {len(letter.payload):,} bytes left out: the "
            "letter would be over the producer's record size limit; the original is at "
            f"{letter.source_topic}[{letter.source_partition}]@{letter.source_offset}]"
        ),
    )
