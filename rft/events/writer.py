"""EventWriter: typed, traced, durable writing of rft events to Kafka topics.

Encodes each event with `EventCodec`, adds an `rft-schema` header and the W3C trace context of the
current OpenTelemetry context, and produces it idempotently with acks=all. With a transactional id
it also commits a reader's offsets atomically with the events written (`send_offsets`).

While Kafka is down, flushes and transaction steps (begin, commit, abort) are retried inside the
cluster's outage window (`stack.kafka.outage_timeout`): a step counts as done only once the broker
acknowledged it, and a step that failed in a way that may have lost something (an abortable
transaction, a delivery error) is raised at once, never retried blindly. Sending a reader's
offsets is never retried (see `_send_offsets`): its caller aborts and reads the records again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from rft.config.connections import KafkaSettings
from rft.errors import FencedError, RftError, TransportError
from rft.events.codec import EventCodec
from rft.events.dead_letter import SCHEMA_HEADER
from rft.events.models import Event
from rft.events.transport import (
    Headers,
    RecordProducer,
    TopicPartitionOffset,
    kafka_backend,
    kafka_outage_window,
    retriable_in_outage,
)
from rft.stack.outage_window import OutageWindow
from rft.tracing.propagation import inject_trace_headers

if TYPE_CHECKING:
    from rft.events.reader import Envelope, EventReader

log = logging.getLogger(__name__)

# Seconds one attempt of a flush or transaction step may block: short, so that an outage is
# noticed (and logged) early; the outage window, not this, bounds the whole wait.
ATTEMPT_S = 10.0


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    """An encoded event with its topic, key and headers, checked and ready to queue."""

    topic: str
    value: bytes
    key: bytes | None
    headers: Headers


class EventWriter:
    """Writes events; use as a context manager so queued events are flushed on exit.

    Leaving the `with` block on an exception inside an open transaction aborts it.
    """

    def __init__(
        self,
        producer: RecordProducer,
        codec: EventCodec,
        transactional: bool = False,
        window: OutageWindow | None = None,
    ) -> None:
        self._producer = producer
        self._window = window
        self._codec = codec
        self._transactional = transactional
        self._in_transaction = False
        self._offsets_sent: list[tuple[EventReader, list[TopicPartitionOffset]]] = []
        self._schema_headers: dict[type[Any], bytes] = {}

    @classmethod
    def open(
        cls,
        kafka_settings: KafkaSettings,
        transactional_id: str | None = None,
        *,
        codec: EventCodec | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> EventWriter:
        """A writer for `kafka_settings`; the client connects on the first send."""
        producer = kafka_backend(kafka_settings).producer(transactional_id, config)
        return cls(
            producer,
            codec or EventCodec.default(),
            transactional_id is not None,
            kafka_outage_window(kafka_settings),
        )

    def _durably(self, what: str, step: Callable[[], None], *, remote: bool = True) -> None:
        """`step` once, or, with an outage window, until Kafka acknowledges it (`remote`: a
        success of `step` means a broker answered)."""
        if self._window is None:
            step()
        else:
            self._window.call(what, step, retriable_in_outage, proves_reachable=remote)

    def send(
        self,
        topic: str,
        event: Event,
        key: str | bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        """Queue `event` for `topic`; records with one key keep one partition, in order.

        RecordTooLargeError (nothing queued) when the encoded event is over the producer's limit.
        """
        self.send_record(self.prepare(topic, event, key, headers))

    def prepare(
        self,
        topic: str,
        event: Event,
        key: str | bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> OutgoingRecord:
        """`event` encoded for `topic` and checked against the producer's record size limit
        (RecordTooLargeError), not yet queued: to check several records before sending any."""
        schema = self._schema_headers.get(type(event))
        if schema is None:
            schema = self._schema_headers.setdefault(type(event), type(event).SCHEMA.encode())
        record_headers = [(SCHEMA_HEADER, schema), *headers]
        inject_trace_headers(record_headers)
        record = OutgoingRecord(
            topic,
            self._codec.encode(event),
            key.encode() if isinstance(key, str) else key,
            record_headers,
        )
        self._producer.check_size(record.topic, record.value, record.key, record.headers)
        return record

    def send_record(self, record: OutgoingRecord) -> None:
        """Queue a record made by `prepare`."""
        self._producer.produce(record.topic, record.value, key=record.key, headers=record.headers)

    def send_raw(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        """Queue bytes as they are (replay of exported records, fault injection)."""
        self._producer.produce(topic, value, key=key, headers=list(headers))

    def flush(self, timeout_s: float = 30.0) -> None:
        """Block until every queued event is acknowledged by all in-sync replicas; with an
        outage window, `timeout_s` bounds each attempt and the window the whole wait."""
        attempt_s = min(timeout_s, ATTEMPT_S) if self._window is not None else timeout_s
        self._durably("flush", lambda: self._producer.flush(attempt_s))

    @property
    def window(self) -> OutageWindow | None:
        """The outage window this writer's calls ride out (None: a failure raises at once)."""
        return self._window

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    def begin(self) -> None:
        # the clients begin a transaction locally (only a producer's first one asks the broker,
        # to initialise): its success says nothing of an outage
        self._durably("begin transaction", self._producer.begin_transaction, remote=False)
        self._in_transaction = True
        self._offsets_sent = []

    def send_offsets(
        self, reader: EventReader, envelopes: Sequence[Envelope], metadata: str = ""
    ) -> None:
        """Add the offsets after `envelopes` (and the records parked among them) to the open
        transaction, so they are committed for `reader`'s group if and only if it commits.
        `metadata` is stored with each committed offset."""
        offsets = reader.offsets_after(envelopes, metadata)
        if not offsets:
            return
        self._send_offsets(reader, offsets)
        self._offsets_sent.append((reader, offsets))

    def send_offset_positions(
        self, reader: EventReader, offsets: Sequence[TopicPartitionOffset]
    ) -> None:
        """Add explicit next-to-read `offsets` (each with its metadata) to the open transaction,
        for `reader`'s group: for a consumer whose commit carries state in its metadata even when
        it has read nothing new since the last one."""
        if not offsets:
            return
        self._send_offsets(reader, list(offsets))
        self._offsets_sent.append((reader, list(offsets)))

    def _send_offsets(self, reader: EventReader, offsets: list[TopicPartitionOffset]) -> None:
        # Not retried: after an outage the reader's group may have moved on (a member whose
        # session expired rejoins only when it polls again), and offsets it no longer owns must
        # not be committed. The caller aborts and reads those records again.
        self._producer.send_offsets_to_transaction(offsets, reader.group_metadata(), ATTEMPT_S)

    def commit(self) -> None:
        """Commit the open transaction; returns only once the broker has committed it."""
        self._durably("commit transaction", lambda: self._producer.commit_transaction(ATTEMPT_S))
        self._in_transaction = False
        sent, self._offsets_sent = self._offsets_sent, []
        for reader, offsets in sent:
            reader.mark_committed(offsets)

    def reclaim(self) -> None:
        """Replace a producer the broker fenced on its own (rft.events.claims decides that):
        what the open transaction held is gone; the next transaction starts on a new producer."""
        self._producer.reclaim()
        self._in_transaction = False
        self._offsets_sent = []

    def claim(self) -> None:
        """An empty transaction, ridden through outages: it claims the transactional id (an
        older producer with it is fenced) and proves this one still holds it (a newer one
        took it over: ProducerFencedError)."""
        self.begin()
        self.commit()

    def abort(self) -> None:
        self._in_transaction = False
        self._offsets_sent = []
        self._durably("abort transaction", lambda: self._producer.abort_transaction(ATTEMPT_S))

    def close(self) -> None:
        self._producer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, FencedError):
            # A fenced producer can neither abort nor flush (its transaction is void already):
            # let the fence be the error the caller sees, not a second one from cleaning up.
            with contextlib.suppress(TransportError):
                self.close()
            return
        if exc is None:
            self.close()
            return
        # Leaving on an error: cleaning up must not put a second error in its place (a flush
        # that timed out against an unreachable broker once hid the outage error that caused it).
        for step in ([self.abort] if self._in_transaction else []) + [self.close]:
            try:
                step()
            except RftError as cleanup:
                log.warning("cleaning up a writer after %s: %s", type(exc).__name__, cleanup)
