"""The Kafka core's policy, written once for every backend, run over an in-memory client: where
kept seeks go, what rejoin forgets, when a transactional producer is replaced, given up or never
replaced, and what close flushes. The backends' client calls are tested against the real broker
(tests/integration/test_transport_contract.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from rft.config.connections import KafkaSettings
from rft.errors import BrokerUnavailableError, TransportError
from rft.events import transport
from rft.events.kafka_core import (
    ClientErrors,
    CoreRecordConsumer,
    CoreRecordProducer,
    Partition,
    SeekSpec,
)
from rft.events.transport import (
    Headers,
    ProducerFencedError,
    Record,
    StuckCallError,
    TopicPartitionOffset,
    TransactionError,
)

SETTINGS = KafkaSettings(bootstrap_servers="broker-a:9092")


class ClientFailure(Exception):
    """What the in-memory client raises; its flags answer ClientErrors' questions."""

    def __init__(self, text: str, *, fenced: bool = False, fatal: bool = False) -> None:
        super().__init__(text)
        self.fenced, self.fatal = fenced, fatal


class Errors(ClientErrors):
    types = (ClientFailure,)

    def fatal(self, exc: BaseException | None) -> bool:
        return isinstance(exc, ClientFailure) and exc.fatal

    def producer_fenced(self, exc: BaseException) -> bool:
        return isinstance(exc, ClientFailure) and exc.fenced

    def requires_abort(self, exc: BaseException) -> bool:
        return not self.fatal(exc)


@dataclass
class Client:
    """An in-memory client: what it holds, and every call made of it."""

    assigned: list[Partition] = field(default_factory=list)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    queued: int = 0  # records a flush leaves unacknowledged
    abort_fails: ClientFailure | None = None
    report: Any = None  # the client's error callback, as the producer gave it


class Consumer(CoreRecordConsumer[Client]):
    errors = Errors()

    def __init__(self) -> None:
        super().__init__(SETTINGS, "g", ["t"], None)
        self.opened: list[Client] = []

    def rebalance(self, assigned: list[Partition]) -> None:
        """A rebalance inside poll: what the backend's callback does."""
        client = self._consumer
        client.assigned = assigned
        specs = self._assigned_now(assigned)
        if specs:
            self._seek_now(client, specs)
        self._pause_assigned(assigned)

    def _open(self) -> Client:
        self.opened.append(Client())
        return self.opened[-1]

    def _fetch_now(self, client: Client, max_records: int, timeout_s: float) -> Any:
        return []

    def _records(self, fetched: Any) -> list[Record]:
        return []

    def _assignment_now(self, client: Client) -> list[Partition]:
        return list(client.assigned)

    def _seek_now(self, client: Client, specs: Mapping[Partition, SeekSpec]) -> None:
        client.calls += [("seek", tp, spec) for tp, spec in specs.items()]

    def _commit_now(self, client: Client, offsets: Sequence[TopicPartitionOffset]) -> None: ...

    def _committed_now(self, client: Client, timeout_s: float) -> list[TopicPartitionOffset]:
        return []

    def _positions_now(self, client: Client) -> dict[Partition, int]:
        return {}

    def _pause_now(self, client: Client, partitions: Sequence[Partition], paused: bool) -> None:
        client.calls.append(("pause" if paused else "resume", *partitions))

    def _group_metadata_now(self, client: Client) -> Any:
        return None

    def _unreachable(self, client: Client) -> str | None:
        return None

    def _close_client(self, client: Client) -> None:
        client.calls.append(("close",))


def test_a_seek_of_a_partition_not_held_waits_for_its_assignment_and_applies_once() -> None:
    consumer = Consumer()
    consumer.rebalance([("t", 0)])
    consumer.seek("t", 0, 5)  # held: now
    consumer.seek("t", 1, 7)  # not held: kept
    client = consumer.opened[0]
    assert client.calls == [("seek", ("t", 0), ("offset", 5))]
    consumer.rebalance([("t", 0), ("t", 1)])
    assert client.calls[1:] == [("seek", ("t", 1), ("offset", 7))]
    consumer.rebalance([("t", 1)])  # assigned again: the kept seek was spent
    assert len(client.calls) == 2


def test_a_seek_of_every_partition_before_any_is_assigned_goes_to_the_first_assignment() -> None:
    consumer = Consumer()
    consumer.seek_to_timestamp(1_000)
    consumer.seek_to_beginning([("t", 2)])  # its own seek wins over the one for all
    consumer.rebalance([("t", 1), ("t", 2)])
    assert consumer.opened[0].calls == [
        ("seek", ("t", 1), ("timestamp", 1_000)),
        ("seek", ("t", 2), ("beginning", 0)),
    ]
    consumer.rebalance([("t", 3)])
    assert len(consumer.opened[0].calls) == 2


def test_rejoin_counts_what_was_held_as_revoked_and_forgets_kept_seeks() -> None:
    consumer = Consumer()
    consumer.rebalance([("t", 0), ("t", 1)])
    consumer.seek("t", 4, 9)
    consumer.rejoin()
    assert consumer.opened[0].calls == [("close",)]
    assert consumer.take_revoked() == {("t", 0), ("t", 1)}
    assert consumer.take_revoked() == set()
    consumer.rebalance([("t", 4)])  # a new client, which reads from the committed offset
    assert len(consumer.opened) == 2 and consumer.opened[1].calls == []


def test_a_pause_holds_across_rebalances_and_rejoin_until_resumed() -> None:
    consumer = Consumer()
    consumer.rebalance([("t", 0), ("t", 1)])
    consumer.pause([("t", 0), ("t", 2)])  # t[2] is not held: paused when it is assigned
    client = consumer.opened[0]
    assert client.calls == [("pause", ("t", 0))]
    # a client resumes what it assigns: the pauses are made again
    consumer.rebalance([("t", 0), ("t", 1), ("t", 2)])
    assert client.calls[1:] == [("pause", ("t", 0), ("t", 2))]
    consumer.resume([("t", 2)])
    assert client.calls[2:] == [("resume", ("t", 2))]
    consumer.rejoin()
    consumer.rebalance([("t", 0), ("t", 1), ("t", 2)])
    assert consumer.opened[1].calls == [("pause", ("t", 0))]


class Producer(CoreRecordProducer[Client]):
    errors = Errors()
    transactional_stall_s = 0.0
    max_record_bytes = 1 << 20
    record_limit_setting = "max.record.bytes"

    def __init__(self, transactional_id: str | None = "tx") -> None:
        super().__init__(SETTINGS, transactional_id)
        self.opened: list[Client] = []
        self.fenced: str | None = None

    def _open(self) -> Client:
        self.opened.append(Client())
        return self.opened[-1]

    def _send_now(
        self,
        client: Client,
        topic: str,
        value: bytes,
        key: bytes | None,
        headers: Headers | None,
        partition: int | None,
    ) -> None:
        client.queued += 1

    def _flush_now(self, client: Client, timeout_s: float) -> str | None:
        client.calls.append(("flush",))
        return f"{client.queued} record(s)" if client.queued else None

    def _init_now(self, client: Client) -> None:
        client.calls.append(("init",))

    def _begin_now(self, client: Client) -> None:
        client.calls.append(("begin",))

    def _send_offsets_now(
        self,
        client: Client,
        offsets: Sequence[TopicPartitionOffset],
        group_metadata: Any,
        timeout_s: float,
    ) -> None: ...

    def _commit_now(self, client: Client, timeout_s: float) -> None:
        client.calls.append(("commit",))

    def _abort_now(self, client: Client, timeout_s: float) -> None:
        client.calls.append(("abort",))
        if client.abort_fails is not None:
            raise client.abort_fails

    def _discard(self, client: Client, stuck: bool) -> None:
        client.calls.append(("discard", stuck))

    def _close_client(self, client: Client) -> None:
        client.calls.append(("close",))

    def _fence_detail(self) -> str | None:
        return self.fenced

    def _forget_fatal(self) -> None:
        self.fenced = None


def test_a_transactional_producer_that_delivers_nothing_past_its_stall_bound_is_given_up() -> None:
    producer = Producer()
    producer.begin_transaction()
    producer.produce("t", b"x")
    with pytest.raises(BrokerUnavailableError, match="1 record\\(s\\) not acknowledged"):
        producer.flush(1.0)  # the first undelivered flush starts the stall
    time.sleep(0.01)
    with pytest.raises(StuckCallError, match="delivered nothing to broker-a:9092"):
        producer.flush(1.0)
    first = producer.opened[0]
    producer.abort_transaction()  # a given-up client takes no abort: it is replaced
    assert ("abort",) not in first.calls and first.calls[-1] == ("discard", True)
    producer.begin_transaction()
    assert producer.opened[1].calls == [("init",), ("begin",)]


def test_a_producer_without_transactions_is_never_given_up_for_a_stall() -> None:
    producer = Producer(transactional_id=None)
    producer.produce("t", b"x")
    for _ in range(3):
        time.sleep(0.01)
        with pytest.raises(BrokerUnavailableError):
            producer.flush(1.0)


def test_an_abort_that_fails_fatally_replaces_the_client_and_a_retriable_one_is_raised() -> None:
    producer = Producer()
    producer.begin_transaction()
    producer.opened[0].abort_fails = ClientFailure("invalid txn state", fatal=True)
    producer.abort_transaction()  # the promise kept: the new client's init aborts it
    assert producer.opened[0].calls[-1] == ("discard", False)
    producer.begin_transaction()
    producer.opened[1].abort_fails = ClientFailure("coordinator moved")
    with pytest.raises(TransactionError, match="transaction abort failed") as err:
        producer.abort_transaction()
    assert err.value.requires_abort and len(producer.opened) == 2


def test_a_fenced_producer_is_never_replaced_and_its_close_flushes_nothing() -> None:
    producer = Producer()
    producer.begin_transaction()
    producer.fenced = "delivery to t: ProducerFenced"
    with pytest.raises(ProducerFencedError, match="fenced: another process started with"):
        producer.abort_transaction()
    with pytest.raises(ProducerFencedError):
        producer.commit_transaction()
    client = producer.opened[0]
    assert ("abort",) not in client.calls and ("commit",) not in client.calls
    producer.close()
    assert client.calls[-1] == ("close",) and ("flush",) not in client.calls
    assert len(producer.opened) == 1


def test_a_client_error_leaves_as_a_transport_error_naming_what_and_where() -> None:
    class Failing(Producer):
        def _send_now(self, client: Client, topic: str, *args: Any) -> None:
            raise ClientFailure("queue closed")

    with pytest.raises(TransportError, match=r"cannot produce to t\[3\]: ClientFailure"):
        Failing().produce("t", b"x", partition=3)


def test_a_given_up_clients_late_fence_and_errors_do_not_reach_its_successor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A send_offsets stuck past its bound gives the client up; the successor's init fences it.
    When the stuck call then returns with that fence, and the old client's error callback says
    so too, the successor is not fenced: its transaction commits (a trainer once stopped with
    "another process ... took over" when no other process existed)."""
    monkeypatch.setattr(transport, "STUCK_GRACE_S", 0.0)
    release = threading.Event()

    class Stuck(Producer):
        def _open(self) -> Client:
            client = super()._open()
            client.report = self._while_current(self._client_says_fenced)  # its error callback
            return client

        def _client_says_fenced(self, detail: str) -> None:
            self.fenced = detail

        def _send_offsets_now(
            self,
            client: Client,
            offsets: Sequence[TopicPartitionOffset],
            group_metadata: Any,
            timeout_s: float,
        ) -> None:
            if client is self.opened[0]:
                release.wait(30)
                raise ClientFailure("operation with an old epoch", fenced=True)
            client.calls.append(("send_offsets",))

    producer = Stuck()
    producer.begin_transaction()
    with pytest.raises(StuckCallError):
        producer.send_offsets_to_transaction([], None, timeout_s=0.05)
    producer.abort_transaction()  # given up: replaced
    producer.begin_transaction()  # the successor initialises (this fences the old client)
    first = producer.opened[0]
    release.set()
    for thread in threading.enumerate():
        if thread.name.startswith("rft-transaction send_offsets"):
            thread.join(30)
    first.report("_FENCED: the successor's epoch")
    producer.send_offsets_to_transaction([], None)
    producer.commit_transaction()
    assert producer.opened[1].calls == [("init",), ("begin",), ("send_offsets",), ("commit",)]
    assert len(producer.opened) == 2
