"""What a writer and a status announcer let through when Kafka fails under them.

- Leaving a writer's `with` block on an error, cleaning up (abort, close: a flush) may fail too;
  the error the caller sees stays the one that ended the block.
- A status that cannot be announced is logged and the run goes on, its transaction aborted; a
  fence is not a lost status but the process's role taken over, and it reaches the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from rft.errors import BrokerUnavailableError, FencedError, OutageError, TransportError
from rft.events.codec import EventCodec
from rft.events.transport import ProducerFencedError, RecordProducer, TopicPartitionOffset
from rft.events.writer import EventWriter
from rft.producers.status_announcer import StatusAnnouncer


class UnackedProducer(RecordProducer):
    """A producer whose broker never acknowledges: queued records stay queued. `commit_error`
    is what committing a transaction raises."""

    def __init__(self, commit_error: Exception | None = None) -> None:
        self.commit_error = commit_error
        self.queued = 0
        self.calls: list[str] = []

    @property
    def max_record_bytes(self) -> int:
        return 1 << 20

    @property
    def record_limit_setting(self) -> str:
        return "message.max.bytes"

    def produce(self, topic: str, value: bytes, key=None, headers=None, partition=None) -> None:
        self.queued += 1

    def flush(self, timeout_s: float = 30.0) -> None:
        self.calls.append("flush")
        if self.queued:
            raise BrokerUnavailableError(f"{self.queued} record(s) not acknowledged")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(
        self, offsets: Sequence[TopicPartitionOffset], group_metadata: Any, timeout_s: float = 30
    ) -> None:
        pass

    def commit_transaction(self, timeout_s: float = 30.0) -> None:
        self.calls.append("commit")
        if self.commit_error is not None:
            raise self.commit_error

    def abort_transaction(self, timeout_s: float = 30.0) -> None:
        self.calls.append("abort")
        self.queued = 0

    def reclaim(self) -> None:
        pass

    def close(self) -> None:
        self.flush()


def writer(producer: UnackedProducer, transactional: bool = False) -> EventWriter:
    return EventWriter(producer, EventCodec.default(), transactional=transactional)


def announcer(producer: UnackedProducer) -> StatusAnnouncer:
    return StatusAnnouncer(
        writer(producer, transactional=True),
        "p.n.control",
        "trainer",
        "t",
        "g",
        total_steps=3,
        transactional=True,
    )


def test_the_error_that_ended_the_block_is_the_one_raised_not_the_cleanup_s() -> None:
    producer = UnackedProducer()
    w = writer(producer)
    with pytest.raises(OutageError, match="kafka unreachable"), w:
        w.send_raw("p.n.metrics", b"x")
        raise OutageError("kafka unreachable past the window")
    assert producer.calls == ["flush"]  # the close was tried, and its failure only logged


def test_a_clean_exit_still_reports_what_was_not_acknowledged() -> None:
    producer = UnackedProducer()
    w = writer(producer)
    with pytest.raises(BrokerUnavailableError), w:
        w.send_raw("p.n.metrics", b"x")


def test_a_status_that_cannot_be_committed_is_logged_and_its_transaction_aborted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    producer = UnackedProducer(commit_error=TransportError("commit timed out"))
    status = announcer(producer)
    with caplog.at_level(logging.WARNING):
        sent = status.announce("waiting", step=2, detail="waiting 5s for a batch")
    assert sent.state == "waiting" and sent.step == 2
    assert producer.calls == ["begin", "commit", "abort"]
    assert not status.writer.in_transaction
    assert "could not announce waiting" in caplog.text


def test_a_fence_met_announcing_a_status_reaches_the_caller() -> None:
    producer = UnackedProducer(
        commit_error=ProducerFencedError("fenced: another process took over")
    )
    with pytest.raises(FencedError, match="another process took over"):
        announcer(producer).announce("waiting", step=2, detail="waiting 5s for a batch")
    assert producer.calls == ["begin", "commit"]  # nothing more is tried on a fenced producer
