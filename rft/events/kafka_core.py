"""What every Kafka client backend does the same way, written once for all of them.

Owns the policy of the client wrappers: seeks of partitions not assigned yet (kept, and applied
once when the partition is assigned), pauses (kept until resumed, and applied again on each
assignment), the revoked set and rejoin, the outage window of a polling
consumer, the transaction steps with their fencing, stuck-call and stall rules, when a producer
is flushed, replaced or given up, the prefetch bounds, and the wording of every error. A backend
module subclasses `CoreTopicAdmin`, `CoreRecordProducer`, `CoreRecordConsumer` and `CoreBackend`
and supplies only its client calls (the abstract `_..._now` methods) and how its client's
exceptions read (`ClientErrors`). This module imports no client library.
"""

from __future__ import annotations

import contextlib
import logging
import time
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from rft.config.connections import KafkaSettings
from rft.errors import BrokerUnavailableError, FencedError, TransportError
from rft.events.transport import (
    DEFAULT_UNREACHABLE_TIMEOUT_S,
    ConsumerFencedError,
    Headers,
    KafkaBackend,
    PartitionBounds,
    ProducerFencedError,
    Record,
    RecordConsumer,
    RecordProducer,
    StuckCallError,
    TopicAdmin,
    TopicPartitionOffset,
    TopicSpec,
    TransactionError,
    bounded_call,
    fenced_message,
    kafka_outage_window,
)

log = logging.getLogger(__name__)

Partition = tuple[str, int]
SeekSpec = tuple[str, int]  # ("offset", n) | ("beginning", 0) | ("timestamp", ms)
# What an offset lookup asks of a partition: its oldest kept record, its end, or the first record
# stamped at or after a time (ms since the epoch).
OffsetQuery = str | int  # "earliest" | "latest" | timestamp_ms

C = TypeVar("C")  # a backend's client object


class ClientErrors:
    """How one client library's exceptions read: all the core knows of them.

    A backend subclasses it, sets `types` to the exceptions its client raises, and answers the
    questions below for one of them; the defaults suit a client that says nothing more."""

    types: tuple[type[BaseException], ...] = ()

    def describe(self, exc: BaseException) -> str:
        """The exception in one line, for an error message."""
        return repr(exc)

    def unavailable(self, exc: BaseException) -> bool:
        """The call reached no broker or coordinator: nothing happened, it may be repeated."""
        return False

    def disconnected(self, exc: BaseException) -> bool:
        """A poll failed only because no broker answered: the client reconnects by itself, and
        the poll counts as one more silence of an outage (the consumer's window bounds it)."""
        return self.unavailable(exc)

    def fatal(self, exc: BaseException | None) -> bool:
        """The client that raised it takes no more calls."""
        return False

    def producer_fenced(self, exc: BaseException) -> bool:
        """A newer producer took over this one's transactional id."""
        return False

    def consumer_fenced(self, exc: BaseException) -> bool:
        """A newer member joined the group with this consumer's group.instance.id."""
        return False

    def requires_abort(self, exc: BaseException) -> bool:
        """A failed transaction step that leaves the transaction to be aborted."""
        return False

    def retriable(self, exc: BaseException) -> bool:
        """A failed transaction step that lost nothing and may simply be called again."""
        return False


class _Translating:
    """Turns a client's exceptions into TransportError, naming what was being done and where."""

    errors: ClassVar[ClientErrors]
    _settings: KafkaSettings

    @contextlib.contextmanager
    def _calling(self, what: str, may_be_unavailable: bool = False) -> Iterator[None]:
        """Runs the block; a client exception leaves it as TransportError(`what`: reason), or as
        BrokerUnavailableError when `may_be_unavailable` and the call reached no broker."""
        try:
            yield
        except self.errors.types as exc:
            unavailable = may_be_unavailable and self.errors.unavailable(exc)
            error = BrokerUnavailableError if unavailable else TransportError
            raise error(f"{what}: {self.errors.describe(exc)}") from exc


def undelivered_expiry_ms(settings: KafkaSettings) -> int:
    """How long a queued record may wait for delivery: it must outlive any outage the window
    rides out (kafka-python expires records after 120 s by default: a trainer lost a metric, and
    another its announcement, and exited, after a 12 s outage it took two minutes to recover
    from)."""
    return int((settings.outage_timeout + 60) * 1000)


def group_config(group_id: str, from_beginning: bool) -> dict[str, Any]:
    """The Java-style settings that make a consumer a member of `group_id`."""
    return {"group.id": group_id, "auto.offset.reset": "earliest" if from_beginning else "latest"}


def where_text(topic: str, partition: int | None) -> str:
    return f"{topic}[{partition if partition is not None else 'any'}]"


def _seek_text(spec: SeekSpec) -> str:
    kind, value = spec
    if kind == "offset":
        return str(value)
    if kind == "beginning":
        return "the beginning"
    return f"timestamp {value}"


class CoreTopicAdmin(_Translating, TopicAdmin):
    """The admin parts that read the same for every client: topic creation and its wait for
    leaders, offset lookups and their answers."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings

    @abstractmethod
    def _create_now(self, specs: Sequence[TopicSpec], timeout_s: float) -> list[str]:
        """Create the topics; the names created (one that exists already is skipped)."""

    @abstractmethod
    def _leaderless(self, names: Sequence[str], timeout_s: float) -> list[str]:
        """Those of `names` the metadata does not show yet with a leader for every partition."""

    @abstractmethod
    def _partitions(self, topics: Sequence[str], timeout_s: float) -> list[Partition]:
        """Every partition of `topics`, in topic and partition order; TransportError naming the
        topics that do not exist (`_refuse_missing`)."""

    @abstractmethod
    def _list_offsets(
        self, queries: Mapping[Partition, OffsetQuery], timeout_s: float, committed: bool = False
    ) -> dict[Partition, int]:
        """The offset each query finds (-1 for a time past the last record); with `committed`,
        "latest" is the last stable offset."""

    def _refuse_missing(self, missing: Sequence[str]) -> None:
        if missing:
            raise TransportError(
                f"no such topic(s) on {self._settings.bootstrap_servers}: {', '.join(missing)}"
            )

    def create_topics(self, specs: Sequence[TopicSpec], timeout_s: float = 30.0) -> list[str]:
        if not specs:
            return []
        existing = set(self.list_topics(timeout_s))
        wanted = [s for s in specs if s.name not in existing]
        created = self._create_now(wanted, timeout_s) if wanted else []
        self._wait_for_leaders([s.name for s in specs], timeout_s)
        return sorted(created)

    def _wait_for_leaders(self, names: Sequence[str], timeout_s: float) -> None:
        # A created topic is usable only once every partition has a leader in the metadata,
        # which lags behind the broker's answer to the create request.
        deadline = time.monotonic() + timeout_s
        while True:
            pending = self._leaderless(names, timeout_s)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TransportError(
                    f"topics {pending} have no leader after {timeout_s:g}s on "
                    f"{self._settings.bootstrap_servers}"
                )
            time.sleep(0.1)

    def partition_bounds(
        self, topics: Sequence[str], timeout_s: float = 10.0, committed: bool = False
    ) -> list[PartitionBounds]:
        tps = self._partitions(topics, timeout_s)
        low = self._list_offsets(dict.fromkeys(tps, "earliest"), timeout_s)
        high = self._list_offsets(dict.fromkeys(tps, "latest"), timeout_s, committed)
        return [PartitionBounds(t, p, low[(t, p)], high[(t, p)]) for t, p in tps]

    def offsets_for_timestamp(
        self, topics: Sequence[str], timestamp_ms: int, timeout_s: float = 10.0
    ) -> dict[tuple[str, int], int]:
        tps = self._partitions(topics, timeout_s)
        found = self._list_offsets(dict.fromkeys(tps, int(timestamp_ms)), timeout_s)
        high = self._list_offsets(dict.fromkeys(tps, "latest"), timeout_s)
        return {key: offset if offset >= 0 else high[key] for key, offset in found.items()}


class CoreRecordProducer(_Translating, RecordProducer, Generic[C]):
    """An idempotent producer, optionally transactional, over a backend's client `C`.

    The client is made on first use. A transactional producer is given up (its client dropped;
    a new one with the same transactional id fences it and aborts what it left open) when a call
    blocks past its bound, when its client failed fatally, or when it delivers nothing for
    `transactional_stall_s`; it is never replaced once fenced by another process."""

    # Seconds a transactional producer may go on delivering nothing before it is given up and
    # replaced (its transaction aborted; the caller redoes its step on a new producer). None: the
    # client bounds its own transactions.
    transactional_stall_s: ClassVar[float | None] = None

    def __init__(self, settings: KafkaSettings, transactional_id: str | None) -> None:
        self._settings = settings
        self._transactional_id = transactional_id
        self._client: C | None = None
        # Which client is the live one: bumped each time one is dropped. A client given up while
        # a call of it was stuck lives on behind that call: when the call returns, and when its
        # callbacks fire (a late fence, a failed delivery), it speaks of a client that is no
        # longer this producer's, and its successor must not take the blame (a successor marked
        # fenced by it would stop a run nobody took over).
        self._generation = 0
        self._initialised = False
        self._in_transaction = False  # begun, not yet committed or aborted
        self._stuck = False  # a call never returned: the client must not be used again
        self._failures: list[str] = []
        self._undelivered_since: float | None = None  # first of consecutive timed-out flushes
        # a fence a transactional call reported: librdkafka tells its error callback only when
        # polled, and until then answers later calls with other errors (_CONFLICT, _STATE)
        self._fenced_by: str | None = None

    # -- what a backend supplies

    @abstractmethod
    def _open(self) -> C:
        """A new client, configured."""

    @abstractmethod
    def _send_now(
        self,
        client: C,
        topic: str,
        value: bytes,
        key: bytes | None,
        headers: Headers | None,
        partition: int | None,
    ) -> None:
        """Queue one record; a failed delivery is reported through `_delivery_failed`."""

    @abstractmethod
    def _flush_now(self, client: C, timeout_s: float) -> str | None:
        """Wait for the queue to drain: None once it has, else what is still queued (for the
        message: "3 record(s)")."""

    @abstractmethod
    def _init_now(self, client: C) -> None: ...

    @abstractmethod
    def _begin_now(self, client: C) -> None: ...

    @abstractmethod
    def _send_offsets_now(
        self,
        client: C,
        offsets: Sequence[TopicPartitionOffset],
        group_metadata: Any,
        timeout_s: float,
    ) -> None: ...

    @abstractmethod
    def _commit_now(self, client: C, timeout_s: float) -> None: ...

    @abstractmethod
    def _abort_now(self, client: C, timeout_s: float) -> None: ...

    @abstractmethod
    def _discard(self, client: C, stuck: bool) -> None:
        """Let go of a client given up or fenced, without flushing it (`stuck`: a call of it may
        still be running on another thread)."""

    @abstractmethod
    def _close_client(self, client: C) -> None:
        """Close a client already flushed."""

    def _fence_detail(self) -> str | None:
        """Why the client is known to be fenced by another producer, if it is."""
        return None

    def _fence(self) -> str | None:
        """Why this producer is fenced, if it is: as a transactional call reported it or as the
        client says."""
        return self._fenced_by or self._fence_detail()

    def _fatal_detail(self) -> str | None:
        """Why the client failed fatally (other than a fence), if it did."""
        return None

    def _forget_fatal(self) -> None:
        """The client with the fatal error or fence was dropped."""

    # -- the policy

    @property
    def _producer(self) -> C:
        if self._client is None:
            with self._calling(
                f"cannot create Kafka producer for {self._settings.bootstrap_servers}"
            ):
                self._client = self._open()
        return self._client

    def _delivery_failed(self, topic: str, partition: int | None, detail: str) -> None:
        self._failures.append(f"delivery to {where_text(topic, partition)} failed: {detail}")

    def _while_current(self, callback: Callable[..., None]) -> Callable[..., None]:
        """`callback` for the client in use now, silenced once that client is dropped (a given-up
        client's late errors and deliveries belong to no live producer)."""
        generation = self._generation

        def guarded(*args: Any) -> None:
            if self._generation == generation:
                callback(*args)

        return guarded

    def _raise_failures(self) -> None:
        fence = self._fence()
        if fence is not None:
            raise ProducerFencedError(
                fenced_message(self._transactional_id, self._settings.bootstrap_servers, fence)
            )
        fatal = self._fatal_detail()
        if fatal is not None:
            raise TransportError(
                f"Kafka producer for {self._settings.bootstrap_servers} failed fatally: {fatal}"
            )
        if self._failures:
            first, count = self._failures[0], len(self._failures)
            self._failures = []
            raise TransportError(f"{first} ({count} record(s) failed)")

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None:
        self.check_size(topic, value, key, headers)
        producer = self._producer
        self._raise_failures()
        with self._calling(f"cannot produce to {where_text(topic, partition)}"):
            self._send_now(producer, topic, value, key, headers, partition)

    def flush(self, timeout_s: float = 30.0) -> None:
        if self._client is None:
            return
        with self._calling(f"flush to {self._settings.bootstrap_servers} failed"):
            left = self._flush_now(self._client, timeout_s)
        if left is None:
            self._undelivered_since = None
        self._raise_failures()
        if left is None:
            return
        self._give_up_if_stalled()
        # still queued, not lost: the idempotent producer delivers them once a broker answers
        raise BrokerUnavailableError(
            f"{left} not acknowledged by {self._settings.bootstrap_servers} within {timeout_s:g}s"
        )

    def _give_up_if_stalled(self) -> None:
        stall_s = self.transactional_stall_s
        if stall_s is None or self._transactional_id is None:
            return
        now = time.monotonic()
        self._undelivered_since = self._undelivered_since or now
        if now - self._undelivered_since > stall_s:
            # After a broker restart kafka-python's transactional sender can go on failing to
            # find its coordinator long after the broker is back (seen for 300 s after a 12 s
            # outage): the producer is given up, its transaction aborted, and the caller's step
            # done again on a new one.
            self._undelivered_since, self._stuck = None, True
            raise StuckCallError(
                f"transactional producer {self._transactional_id!r} delivered nothing "
                f"to {self._settings.bootstrap_servers} for {stall_s:g}s"
            )

    def _transactional(self, step: str, action: Callable[[C], None]) -> None:
        if self._transactional_id is None:
            raise TransportError(f"{step} needs a producer opened with a transactional_id")
        if self._fence() is not None:  # no step of a fenced producer can succeed
            self._raise_failures()
        producer = self._producer
        generation = self._generation
        errors = self.errors
        try:
            if not self._initialised:
                self._init_now(producer)
                if self._generation == generation:
                    self._initialised = True
            action(producer)
        except errors.types as exc:
            if self._generation != generation:
                # a call that outlived its client (given up as stuck): its error is that
                # client's, and must not mark the one that replaced it fenced
                raise TransactionError(
                    f"transaction {step} of a producer given up earlier (transactional id "
                    f"{self._transactional_id!r}): {errors.describe(exc)}",
                    requires_abort=False,
                ) from exc
            if errors.producer_fenced(exc):
                self._fenced_by = f"transaction {step}: {errors.describe(exc)}"
                raise ProducerFencedError(
                    fenced_message(
                        self._transactional_id, self._settings.bootstrap_servers, self._fenced_by
                    )
                ) from exc
            raise TransactionError(
                f"transaction {step} failed for transactional id {self._transactional_id!r} on "
                f"{self._settings.bootstrap_servers}: {errors.describe(exc)}",
                requires_abort=errors.requires_abort(exc),
                retriable=errors.retriable(exc),
            ) from exc
        if self._generation == generation:  # a late return reports nothing of the successor's
            self._raise_failures()

    def begin_transaction(self) -> None:
        self._transactional("begin", self._begin_now)
        self._in_transaction = True

    def send_offsets_to_transaction(
        self, offsets: Sequence[TopicPartitionOffset], group_metadata: Any, timeout_s: float = 30.0
    ) -> None:
        # Both clients can block in this call past its timeout: librdkafka when the group
        # coordinator went away and came back (confluentinc/librdkafka#5456); kafka-python waits
        # without a timeout and retries a rebalancing group forever, and after an outage the
        # group waits for this very process to rejoin, which it cannot while blocked here. A
        # producer stuck in it is given up (see abort_transaction).
        try:
            bounded_call(
                f"transaction send_offsets for transactional id {self._transactional_id!r} on "
                f"{self._settings.bootstrap_servers}",
                lambda: self._transactional(
                    "send_offsets",
                    lambda p: self._send_offsets_now(p, offsets, group_metadata, timeout_s),
                ),
                timeout_s,
            )
        except StuckCallError:
            self._stuck = True
            raise

    def commit_transaction(self, timeout_s: float = 30.0) -> None:
        self._transactional("commit", lambda p: self._commit_now(p, timeout_s))
        self._in_transaction = False

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        self._generation += 1
        stuck = self._stuck
        self._initialised, self._stuck, self._in_transaction = False, False, False
        self._fenced_by = None
        self._forget_fatal()
        if client is not None:
            self._discard(client, stuck)

    def reclaim(self) -> None:
        self._failures = []
        self._drop_client()

    def abort_transaction(self, timeout_s: float = 30.0) -> None:
        self._failures = []  # records of an aborted transaction are discarded on purpose
        self._in_transaction = False
        if self._fence() is not None:
            # never replaced: a new producer with this id would fence the process that took over
            self._raise_failures()
        failed: str | None = None
        if not self._stuck and self._fatal_detail() is None:
            try:
                self._transactional("abort", lambda p: self._abort_now(p, timeout_s))
                return
            except TransactionError as exc:
                if isinstance(exc, FencedError):
                    raise  # never replaced: a new producer would fence the one that took over
                if exc.retriable or (
                    self._fatal_detail() is None and not self.errors.fatal(exc.__cause__)
                ):
                    raise
                failed = str(exc)  # fatal, before the client's error callback said so
        # A producer stuck inside a call, or failed fatally (after an outage the broker may
        # answer INVALID_TXN_STATE), takes no more calls. A new producer with the same
        # transactional id fences it when it initialises, and the broker aborts the
        # transaction it left open: the abort this call promises.
        log.warning(
            "transactional producer %r is unusable (%s); replacing it: its open transaction is "
            "aborted when the new one initialises",
            self._transactional_id,
            "stuck in a call" if self._stuck else f"fatal: {self._fatal_detail() or failed}",
        )
        self._drop_client()

    def close(self) -> None:
        if self._client is None:
            return
        try:
            usable = self._fence() is None and self._fatal_detail() is None
            if usable and not self._stuck:  # an unusable client flushes nothing
                self.flush()
        finally:
            client, self._client = self._client, None
            self._generation += 1
            if client is not None:
                self._close_client(client)


class CoreRecordConsumer(_Translating, RecordConsumer, Generic[C]):
    """A consumer-group member over a backend's client `C`, made on first use.

    Seeks of partitions this member does not hold yet are kept and applied when a rebalance
    assigns them, and paused partitions are paused again (the backend's rebalance callback calls
    `_assigned_now`, `_pause_assigned` and `_revoked_now`). poll() tells the outage window
    whether a broker answered."""

    def __init__(
        self,
        settings: KafkaSettings,
        group_id: str,
        topics: Sequence[str],
        unreachable_timeout_s: float | None,
    ) -> None:
        self._settings = settings
        self._topics = list(topics)
        self._group_id = group_id
        self._window = kafka_outage_window(settings, unreachable_timeout_s)
        self._client: C | None = None
        self._suspect = False  # the client said all brokers are down; a probe confirms it
        self._pending_seeks: dict[Partition, SeekSpec] = {}
        self._pending_all: SeekSpec | None = None
        self._revoked: set[Partition] = set()
        # Paused until resume(), across rebalances and rejoins: both clients resume what they
        # assign, and a caller that paused a partition to bound its buffers keeps them after.
        self._paused: set[Partition] = set()

    # -- what a backend supplies

    @abstractmethod
    def _open(self) -> C:
        """A new client subscribed to `self._topics`, its rebalance callbacks calling
        `_assigned_now` and `_revoked_now`."""

    @abstractmethod
    def _fetch_now(self, client: C, max_records: int, timeout_s: float) -> Any:
        """One fetch of up to `max_records`; empty (falsy) when nothing at all came back."""

    @abstractmethod
    def _records(self, fetched: Any) -> list[Record]:
        """The records of a non-empty fetch (ConsumerFencedError, via `_fence`, for a fence)."""

    @abstractmethod
    def _assignment_now(self, client: C) -> list[Partition]: ...

    @abstractmethod
    def _seek_now(self, client: C, specs: Mapping[Partition, SeekSpec]) -> None:
        """Move assigned partitions."""

    @abstractmethod
    def _commit_now(self, client: C, offsets: Sequence[TopicPartitionOffset]) -> None: ...

    @abstractmethod
    def _committed_now(self, client: C, timeout_s: float) -> list[TopicPartitionOffset]: ...

    @abstractmethod
    def _positions_now(self, client: C) -> dict[Partition, int]: ...

    @abstractmethod
    def _pause_now(self, client: C, partitions: Sequence[Partition], paused: bool) -> None:
        """Pause (or resume) assigned partitions."""

    @abstractmethod
    def _group_metadata_now(self, client: C) -> Any: ...

    @abstractmethod
    def _unreachable(self, client: C) -> str | None:
        """None when a broker answers now, else why not (the probe of a suspected outage)."""

    @abstractmethod
    def _close_client(self, client: C) -> None: ...

    def _outage_suspected(self) -> bool:
        """Whether an empty poll is worth a probe (a probe that asks the broker is made only
        once the client itself said it lost every broker)."""
        return self._suspect

    def _raise_if_failed(self) -> None:
        """Raise what the client reported as fatal outside a call, if anything."""

    def _forget_fatal(self) -> None:
        """The client with the fatal error was dropped."""

    # -- the policy

    @property
    def _consumer(self) -> C:
        if self._client is None:
            with self._calling(
                f"cannot subscribe to {self._topics} on {self._settings.bootstrap_servers}"
            ):
                self._client = self._open()
        return self._client

    def _fence(self, detail: str) -> ConsumerFencedError:
        return ConsumerFencedError(
            f"fenced: another process joined consumer group {self._group_id!r} "
            f"with this one's group.instance.id and took over; this one commits "
            f"nothing more ({detail})"
        )

    def _assigned_now(self, partitions: Iterable[Partition]) -> dict[Partition, SeekSpec]:
        """A rebalance assigned `partitions`: the seeks kept for them, taken."""
        assigned = list(partitions)
        spec_all, self._pending_all = self._pending_all, None
        specs: dict[Partition, SeekSpec] = {}
        for tp in assigned:
            spec = self._pending_seeks.pop(tp, None) or spec_all
            if spec is not None:
                specs[tp] = spec
        if assigned:
            log.info("group %s: assigned %s", self._group_id, sorted(assigned))
        return specs

    def _pause_assigned(self, assigned: Iterable[Partition]) -> None:
        """A rebalance assigned `partitions` (the client holds them now): pause again those
        paused before."""
        again = sorted(tp for tp in assigned if tp in self._paused)
        if again:
            with self._calling(f"pause of {', '.join(f'{t}[{p}]' for t, p in again)} failed"):
                self._pause_now(self._consumer, again, True)

    def _revoked_now(self, partitions: Iterable[Partition]) -> None:
        # Called inside poll(), for revoked and for lost partitions (a lost one may already have
        # a new owner). Records of them fetched but not handed out are dropped; the caller learns
        # which it lost through take_revoked(), even when one comes back in the same poll: it is
        # then read again from the group's committed offset.
        revoked = set(partitions)
        self._revoked |= revoked
        if revoked:
            log.info("group %s: revoked %s", self._group_id, sorted(revoked))

    def take_revoked(self) -> set[tuple[str, int]]:
        revoked, self._revoked = self._revoked, set()
        return revoked

    def rejoin(self) -> None:
        if self._client is not None:
            with contextlib.suppress(TransportError, RuntimeError, *self.errors.types):
                self._revoked |= set(self.assignment())
        # a fenced client's close may fail (its membership is gone): it is dropped either way
        self.close()
        self._forget_fatal()
        self._pending_seeks.clear()
        self._pending_all = None

    def _check_reachable(self) -> None:
        self._raise_if_failed()
        if not self._outage_suspected() and not self._window.down:
            return
        # the client reconnects by itself; the probe only tells the window whether it has
        failure = self._unreachable(self._consumer)
        if failure is not None:
            self._window.failed(failure)  # raises OutageError once the outage is past the window
            return
        self._suspect = False
        self._window.succeeded()

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        consumer = self._consumer
        errors = self.errors
        try:
            fetched = self._fetch_now(consumer, max_records, timeout_s)
        except errors.types as exc:
            if errors.consumer_fenced(exc):
                raise self._fence(errors.describe(exc)) from exc
            failure = (
                f"poll of {self._topics} on {self._settings.bootstrap_servers} failed: "
                f"{errors.describe(exc)}"
            )
            if errors.disconnected(exc):
                self._suspect = True
                self._window.failed(failure)  # OutageError once the outage is past the window
                return []
            raise TransportError(failure) from exc
        if not fetched:
            self._check_reachable()
            return []
        self._suspect = False
        self._window.succeeded()
        return self._records(fetched)

    def commit(self, offsets: Sequence[TopicPartitionOffset]) -> None:
        if not offsets:
            return
        where = ", ".join(f"{o.topic}[{o.partition}]@{o.offset}" for o in offsets)
        with self._calling(f"commit of {where} failed", may_be_unavailable=True):
            self._commit_now(self._consumer, offsets)

    def committed(self, timeout_s: float = 10.0) -> list[TopicPartitionOffset]:
        consumer = self._consumer
        with self._calling(f"reading committed offsets of {self._topics} failed"):
            return self._committed_now(consumer, timeout_s)

    def group_metadata(self) -> Any:
        return self._group_metadata_now(self._consumer)

    def assignment(self) -> list[tuple[str, int]]:
        return sorted(self._assignment_now(self._consumer))

    def _seek_assigned(self, specs: Mapping[Partition, SeekSpec]) -> None:
        consumer = self._consumer
        where = ", ".join(f"{t}[{p}] to {_seek_text(s)}" for (t, p), s in specs.items())
        with self._calling(f"seek of {where} failed"):
            self._seek_now(consumer, specs)

    def _seek(self, specs: Mapping[Partition, SeekSpec]) -> None:
        """Seek the partitions held now; keep the others' seeks for their assignment."""
        held = set(self.assignment())
        now = {tp: spec for tp, spec in specs.items() if tp in held}
        self._pending_seeks.update({tp: s for tp, s in specs.items() if tp not in held})
        if now:
            self._seek_assigned(now)

    def _seek_all(self, spec: SeekSpec) -> None:
        assigned = self.assignment()
        if assigned:
            self._seek_assigned(dict.fromkeys(assigned, spec))
        else:
            self._pending_all = spec

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._seek({(topic, partition): ("offset", offset)})

    def seek_to_beginning(self, partitions: Sequence[tuple[str, int]] | None = None) -> None:
        if partitions is None:
            self._seek_all(("beginning", 0))
        else:
            self._seek(dict.fromkeys(partitions, ("beginning", 0)))

    def seek_to_timestamp(self, timestamp_ms: int) -> None:
        self._seek_all(("timestamp", timestamp_ms))

    def positions(self) -> dict[tuple[str, int], int]:
        consumer = self._consumer
        with self._calling(f"cannot read positions in {self._topics}"):
            return self._positions_now(consumer)

    def _pause(self, partitions: Sequence[Partition], paused: bool) -> None:
        if paused:
            self._paused.update(partitions)
        else:
            self._paused.difference_update(partitions)
        held = set(self.assignment())
        now = [tp for tp in partitions if tp in held]
        if not now:
            return
        verb = "pause" if paused else "resume"
        with self._calling(f"{verb} of {', '.join(f'{t}[{p}]' for t, p in now)} failed"):
            self._pause_now(self._consumer, now, paused)

    def pause(self, partitions: Sequence[tuple[str, int]]) -> None:
        self._pause(partitions, True)

    def resume(self, partitions: Sequence[tuple[str, int]]) -> None:
        self._pause(partitions, False)

    def close(self) -> None:
        if self._client is None:
            return
        client, self._client = self._client, None
        failures: tuple[type[BaseException], ...] = (RuntimeError, *self.errors.types)
        try:
            self._close_client(client)
        except failures as exc:
            log.warning("closing Kafka consumer of %s: %s", self._topics, exc)


class CoreBackend(KafkaBackend):
    """Makes one backend's three wrappers; the prefetch bound is the core's, a backend adds the
    keys of its own client's buffers (`_prefetch_config`)."""

    # the wrapper classes, called (settings), (settings, transactional_id, config) and
    # (settings, group_id, topics, from_beginning, config, unreachable_timeout_s)
    admin_type: ClassVar[Callable[..., TopicAdmin]]
    producer_type: ClassVar[Callable[..., RecordProducer]]
    consumer_type: ClassVar[Callable[..., RecordConsumer]]

    def _prefetch_config(self, prefetch_bytes: int) -> dict[str, Any]:
        """Client settings that hold what is fetched ahead of poll() near `prefetch_bytes`."""
        return {
            "fetch.max.bytes": max(prefetch_bytes, 1 << 20),
            "max.partition.fetch.bytes": max(prefetch_bytes // 4, 1 << 20),
        }

    def admin(self) -> TopicAdmin:
        return type(self).admin_type(self.settings)

    def producer(
        self, transactional_id: str | None = None, config: Mapping[str, Any] | None = None
    ) -> RecordProducer:
        return type(self).producer_type(self.settings, transactional_id, config)

    def consumer(
        self,
        group_id: str,
        topics: Sequence[str],
        from_beginning: bool = True,
        config: Mapping[str, Any] | None = None,
        unreachable_timeout_s: float | None = DEFAULT_UNREACHABLE_TIMEOUT_S,
        prefetch_bytes: int | None = None,
    ) -> RecordConsumer:
        if prefetch_bytes is not None:
            config = {**self._prefetch_config(prefetch_bytes), **(config or {})}
        return type(self).consumer_type(
            self.settings, group_id, topics, from_beginning, config, unreachable_timeout_s
        )
