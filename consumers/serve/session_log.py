"""`SessionLog`: serve mode's Kafka side. Each answered call is a `ServeCall` on the run's
`serve-calls` topic, flushed before the caller gets the answer; a session closes in one
transaction that holds its `ServeSessionEnd` with its Experience events (feedback) or its dead
letter (no feedback in time). `read_back` reads the calls topic as committed now, from which a
restarted server rebuilds the sessions still open: an end and the experiences it closes commit
together, so a session's experiences are written exactly once across crashes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Self

from rft.config.connections import KafkaSettings
from rft.consumers.replay.topic_range import RangeReader
from rft.events.models import DeadLetter, Experience, ServeCall, ServeSessionEnd
from rft.events.reader import Envelope
from rft.events.writer import EventWriter


class SessionLog:
    def __init__(
        self,
        kafka: KafkaSettings,
        *,
        calls_topic: str,
        experience_topic: str,
        dead_letter_topic: str,
        transactional_id: str,
    ) -> None:
        self.kafka = kafka
        self.calls_topic = calls_topic
        self.experience_topic = experience_topic
        self.dead_letter_topic = dead_letter_topic
        self._transactional_id = transactional_id
        self._exits = contextlib.ExitStack()
        self._plain: EventWriter | None = None
        self._tx: EventWriter | None = None
        self._tx_lock = threading.Lock()  # one transaction at a time on the one producer

    def __enter__(self) -> Self:
        self._plain = self._exits.enter_context(EventWriter.open(self.kafka))
        self._tx = self._exits.enter_context(
            EventWriter.open(self.kafka, transactional_id=self._transactional_id)
        )
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exits.close()

    def record(self, call: ServeCall) -> None:
        """Write `call` and wait until Kafka has it (TransportError if it cannot)."""
        assert self._plain is not None, "open the log first"
        self._plain.send(self.calls_topic, call, key=call.session_id)
        self._plain.flush()

    def close(
        self,
        end: ServeSessionEnd,
        experiences: Sequence[Experience] = (),
        letter: DeadLetter | None = None,
    ) -> None:
        """`end` with the session's experiences or its dead letter, in one transaction; on any
        failure the transaction is aborted and the error raised (the session stays open)."""
        assert self._tx is not None, "open the log first"
        with self._tx_lock:
            tx = self._tx
            tx.begin()
            try:
                records = [
                    tx.prepare(self.experience_topic, exp, key=exp.task_id) for exp in experiences
                ]
                for record in records:
                    tx.send_record(record)
                if letter is not None:
                    tx.send(self.dead_letter_topic, letter, key=end.session_id)
                tx.send(self.calls_topic, end, key=end.session_id)
                tx.commit()
            except BaseException:
                with contextlib.suppress(Exception):
                    tx.abort()
                raise

    def read_back(self) -> Iterator[Envelope]:
        """Every committed event of the calls topic as it stands now, in partition order."""
        with contextlib.closing(RangeReader.open(self.kafka, [self.calls_topic])) as reader:
            for batch in reader.batches():
                yield from batch
