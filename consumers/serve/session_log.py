"""`SessionLog`: serve mode's Kafka side. Each answered call is a `ServeCall` on the run's
`serve-calls` topic, committed in a transaction before the caller gets the answer; a session
closes in one transaction that holds its `ServeSessionEnd` with its Experience events (feedback)
or its dead letter (no feedback in time). `read_back` reads the calls topic as committed now, from
which a restarted server rebuilds the sessions still open: an end and the experiences it closes
commit together, so a session's experiences are written exactly once across crashes.

Calls are committed, not just flushed, because a call that could not be recorded is refused
(503) and its record must then never count: a plain producer delivers what it queued once the
broker is back, and a restarted server would rebuild the session with a reply its caller never
saw. Calls answered at once share one transaction (group commit: whoever holds the producer
commits every call queued so far), so the cost is one commit per wave of answers.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from rft.config.connections import KafkaSettings
from rft.consumers.replay.topic_range import RangeReader
from rft.errors import FencedError, TransportError
from rft.events.models import DeadLetter, Experience, ServeCall, ServeSessionEnd
from rft.events.reader import Envelope
from rft.events.writer import EventWriter


@dataclass
class _PendingCall:
    call: ServeCall
    done: bool = False
    error: BaseException | None = None


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
        self._tx: EventWriter | None = None
        self._tx_lock = threading.Lock()  # one transaction at a time on the one producer
        self._queue_lock = threading.Lock()
        self._queued: list[_PendingCall] = []

    def __enter__(self) -> Self:
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
        """Commit `call` to the calls topic; returns once Kafka has committed it, else raises
        (TransportError, or the outage's error) and the call's record is aborted."""
        pending = _PendingCall(call)
        with self._queue_lock:
            self._queued.append(pending)
        with self._tx_lock:
            if not pending.done:  # no commit took it while this thread waited: commit the queue
                with self._queue_lock:
                    batch, self._queued = self._queued, []
                error = self._commit_calls([p.call for p in batch])
                for p in batch:
                    p.done, p.error = True, error
        if isinstance(pending.error, FencedError):
            raise pending.error  # another server took the transactional id: not an outage
        if pending.error is not None:
            raise TransportError(f"call {call.call_id}: {pending.error}") from pending.error

    def _commit_calls(self, calls: Sequence[ServeCall]) -> BaseException | None:
        """Commit `calls` in one transaction (under the producer's lock); its error, if any."""
        assert self._tx is not None, "open the log first"
        tx = self._tx
        try:
            tx.begin()
            for call in calls:
                tx.send(self.calls_topic, call, key=call.session_id)
            tx.commit()
        except Exception as exc:
            self._abort(tx)
            return exc
        return None

    @staticmethod
    def _abort(tx: EventWriter) -> None:
        """Abort the open transaction; when even that fails (the broker is still away, or the
        producer is left in a state it cannot leave), replace the producer: the new one, on
        initialising with the same transactional id, has the broker abort what the old left."""
        try:
            tx.abort()
        except Exception:
            tx.reclaim()

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
                self._abort(tx)
                raise

    def read_back(self) -> Iterator[Envelope]:
        """Every committed event of the calls topic as it stands now, in partition order."""
        with contextlib.closing(RangeReader.open(self.kafka, [self.calls_topic])) as reader:
            for batch in reader.batches():
                yield from batch
