"""The confluent-kafka (librdkafka) backend of the event plane: the only module importing it.

Wraps AdminClient, Producer and Consumer behind `rft.events.transport`'s interfaces. Clients are
created on first use; every client error leaves this module as TransportError with the broker,
topic and partition it concerns.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from rft.config.connections import KafkaSettings
from rft.errors import BrokerUnavailableError, FencedError, TransportError
from rft.events.transport import (
    DEFAULT_UNREACHABLE_TIMEOUT_S,
    KAFKA_BACKENDS,
    ConsumerFencedError,
    GroupDescription,
    GroupMember,
    Headers,
    KafkaBackend,
    PartitionBounds,
    PartitionInfo,
    ProducerFencedError,
    Record,
    RecordConsumer,
    RecordProducer,
    StuckCallError,
    TopicAdmin,
    TopicInfo,
    TopicPartitionOffset,
    TopicSpec,
    TransactionError,
    bounded_call,
    commit_metadata_text,
    fenced_message,
    group_state_name,
    kafka_outage_window,
)

log = logging.getLogger(__name__)

# Producer defaults chosen from bench/event_plane.py runs on a 2-core machine: a short linger
# lets batches fill at high rates without adding noticeable latency at low ones.
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's default message.max.bytes

PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "compression.type": "none",
    "queue.buffering.max.kbytes": 512 * 1024,
    "queue.buffering.max.messages": 500_000,
    # Only failed deliveries call back into Python: per-record callbacks would cost more than
    # the encoding itself at tens of thousands of records per second.
    "delivery.report.only.error": True,
}

CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "isolation.level": "read_committed",
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "queued.max.messages.kbytes": 256 * 1024,
    "fetch.wait.max.ms": 100,
}

_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
# What a group's coordinator answers for a moment while it moves or loads.
_COORDINATOR_SETTLING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)
# What a producer whose transactional id a newer one took over is told (librdkafka's own code,
# the broker's since Kafka 2.7, and the older broker code).
_FENCED = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)
# What a partition answers for a moment after its topic was created, before its leader is known.
_LEADER_SETTLING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)

# Errors of a call that reached no broker or coordinator: nothing happened, it may be repeated.
_UNAVAILABLE = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._WAIT_COORD,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    }
)

# librdkafka's own log lines, which it would otherwise print straight to stderr.
LIBRDKAFKA_LOG = logging.getLogger(f"{__name__}.librdkafka")
# Lines about a state librdkafka rides out by itself: at most INFO, whatever its syslog level.
_TRANSIENT_LINES = ("retrying", "Coordinator load in progress")


class LibrdkafkaLog:
    """The `logger` of every confluent client: librdkafka's log lines into LIBRDKAFKA_LOG.

    confluent-kafka calls `log(level, fmt, *args)` with the syslog level already mapped to
    Python's (0-2 CRITICAL, 3 ERROR, 4 WARNING, 5-6 INFO, 7 DEBUG), from the client's poll or
    flush. A line saying librdkafka retries (a coordinator that is still loading at a fresh
    broker's first transaction, say) is transient, not a warning."""

    def log(self, level: int, fmt: str, *args: Any) -> None:
        message = fmt % args if args else fmt
        level = min(level, logging.ERROR)
        if level > logging.INFO and any(t in message for t in _TRANSIENT_LINES):
            level = logging.INFO
        LIBRDKAFKA_LOG.log(level, "%s", message)


_LIBRDKAFKA_LOG = LibrdkafkaLog()

_SeekSpec = tuple[str, int]  # ("offset", n) | ("beginning", 0) | ("timestamp", ms)


def _kafka_error(exc: BaseException | None) -> KafkaError | None:
    """The KafkaError a KafkaException carries, if any."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def _error_text(exc: BaseException) -> str:
    err = _kafka_error(exc)
    return f"{err.name()}: {err.str()}" if err is not None else str(exc)


def _is_fatal(exc: BaseException | None) -> bool:
    err = _kafka_error(exc)
    return err is not None and err.fatal()


def _unavailable(exc: KafkaException) -> bool:
    err = _kafka_error(exc)
    return err is not None and not err.fatal() and err.code() in _UNAVAILABLE


def _merged(settings: KafkaSettings, defaults: Mapping[str, Any], config: Mapping[str, Any] | None):
    merged: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers,
        "logger": _LIBRDKAFKA_LOG,
        **defaults,
    }
    merged.update(settings.extra)
    merged.update(config or {})
    return merged


def _to_tp(o: TopicPartitionOffset) -> TopicPartition:
    if o.metadata:
        return TopicPartition(o.topic, o.partition, o.offset, metadata=o.metadata)
    return TopicPartition(o.topic, o.partition, o.offset)


class ConfluentTopicAdmin(TopicAdmin):
    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._client: AdminClient | None = None

    @property
    def _admin(self) -> AdminClient:
        if self._client is None:
            try:
                self._client = AdminClient(_merged(self._settings, {}, None))
            except KafkaException as exc:
                raise TransportError(
                    f"cannot create Kafka admin client for {self._settings.bootstrap_servers}: "
                    f"{_error_text(exc)}"
                ) from exc
        return self._client

    def _metadata(self, timeout_s: float, topic: str | None = None) -> Any:
        try:
            return self._admin.list_topics(topic=topic, timeout=timeout_s)
        except KafkaException as exc:
            raise TransportError(
                f"Kafka at {self._settings.bootstrap_servers} unreachable (metadata request "
                f"failed after {timeout_s:g}s): {_error_text(exc)}"
            ) from exc

    def create_topics(self, specs: Sequence[TopicSpec], timeout_s: float = 30.0) -> list[str]:
        if not specs:
            return []
        existing = set(self._metadata(timeout_s).topics)
        wanted = [s for s in specs if s.name not in existing]
        created: list[str] = []
        if wanted:
            futures = self._admin.create_topics(
                [
                    NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.configs))
                    for s in wanted
                ],
                operation_timeout=timeout_s,
                request_timeout=timeout_s,
            )
            for name, future in futures.items():
                try:
                    future.result(timeout=timeout_s)
                    created.append(name)
                except KafkaException as exc:
                    if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                        continue  # another process created it between our check and request
                    raise TransportError(
                        f"cannot create topic {name!r} on {self._settings.bootstrap_servers}: "
                        f"{_error_text(exc)}"
                    ) from exc
        self._wait_for_leaders([s.name for s in specs], timeout_s)
        return sorted(created)

    def _wait_for_leaders(self, names: Sequence[str], timeout_s: float) -> None:
        # A created topic is usable only once every partition has a leader in the metadata.
        deadline = time.monotonic() + timeout_s
        pending = list(names)
        while pending:
            topics = self._metadata(timeout_s).topics
            pending = [
                n
                for n in pending
                if n not in topics
                or topics[n].error is not None
                or not topics[n].partitions
                or any(p.leader < 0 for p in topics[n].partitions.values())
            ]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TransportError(
                    f"topics {pending} have no leader after {timeout_s:g}s on "
                    f"{self._settings.bootstrap_servers}"
                )
            time.sleep(0.1)

    def list_topics(self, timeout_s: float = 10.0) -> list[str]:
        return sorted(t for t in self._metadata(timeout_s).topics if not t.startswith("__"))

    def describe_topics(self, names: Sequence[str], timeout_s: float = 10.0) -> list[TopicInfo]:
        topics = self._metadata(timeout_s).topics
        missing = [n for n in names if n not in topics or topics[n].error is not None]
        if missing:
            raise TransportError(
                f"no such topic(s) on {self._settings.bootstrap_servers}: {', '.join(missing)}"
            )
        futures = self._admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, n) for n in names], request_timeout=timeout_s
        )
        configs: dict[str, dict[str, str]] = {}
        for resource, future in futures.items():
            try:
                entries = future.result(timeout=timeout_s)
            except KafkaException as exc:
                raise TransportError(
                    f"cannot describe configs of topic {resource.name!r}: {_error_text(exc)}"
                ) from exc
            configs[resource.name] = {
                k: str(e.value)
                for k, e in entries.items()
                if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and e.value is not None
            }
        out = []
        for n in names:
            parts = sorted(topics[n].partitions.values(), key=lambda p: p.id)
            out.append(
                TopicInfo(
                    name=n,
                    partitions=[
                        PartitionInfo(p.id, p.leader, list(p.replicas), list(p.isrs)) for p in parts
                    ],
                    configs=configs.get(n, {}),
                )
            )
        return out

    def delete_topics(self, names: Sequence[str], timeout_s: float = 30.0) -> None:
        if not names:
            return
        futures = self._admin.delete_topics(list(names), operation_timeout=timeout_s)
        for name, future in futures.items():
            try:
                future.result(timeout=timeout_s)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise TransportError(f"cannot delete topic {name!r}: {_error_text(exc)}") from exc

    def _partitions(self, topics: Sequence[str], timeout_s: float) -> list[TopicPartition]:
        known = self._metadata(timeout_s).topics
        missing = [t for t in topics if t not in known or known[t].error is not None]
        if missing:
            raise TransportError(
                f"no such topic(s) on {self._settings.bootstrap_servers}: {', '.join(missing)}"
            )
        return [TopicPartition(t, p) for t in topics for p in sorted(known[t].partitions)]

    def _list_offsets(
        self, specs: dict[TopicPartition, OffsetSpec], timeout_s: float, committed: bool = False
    ) -> dict[tuple[str, int], int]:
        if not specs:
            return {}
        level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        deadline = time.monotonic() + timeout_s
        out: dict[tuple[str, int], int] = {}
        while specs:
            futures = self._admin.list_offsets(
                specs, isolation_level=level, request_timeout=timeout_s
            )
            settling: dict[TopicPartition, OffsetSpec] = {}
            for tp, future in futures.items():
                try:
                    out[(tp.topic, tp.partition)] = future.result(timeout=timeout_s).offset
                except KafkaException as exc:
                    err = _kafka_error(exc)
                    # a partition of a topic created a moment ago may not have its leader yet
                    leaderless = err is not None and err.code() in _LEADER_SETTLING
                    if leaderless and time.monotonic() < deadline:
                        settling[tp] = specs[tp]
                        continue
                    raise TransportError(
                        f"cannot list offsets of {tp.topic}[{tp.partition}]: {_error_text(exc)}"
                    ) from exc
            specs = settling
            if specs:
                time.sleep(0.2)
        return out

    def partition_bounds(
        self, topics: Sequence[str], timeout_s: float = 10.0, committed: bool = False
    ) -> list[PartitionBounds]:
        tps = self._partitions(topics, timeout_s)
        low = self._list_offsets({tp: OffsetSpec.earliest() for tp in tps}, timeout_s)
        high = self._list_offsets({tp: OffsetSpec.latest() for tp in tps}, timeout_s, committed)
        return [
            PartitionBounds(tp.topic, tp.partition, low[key], high[key])
            for tp in tps
            for key in [(tp.topic, tp.partition)]
        ]

    def offsets_for_timestamp(
        self, topics: Sequence[str], timestamp_ms: int, timeout_s: float = 10.0
    ) -> dict[tuple[str, int], int]:
        tps = self._partitions(topics, timeout_s)
        found = self._list_offsets(
            {tp: OffsetSpec.for_timestamp(timestamp_ms) for tp in tps}, timeout_s
        )
        high = self._list_offsets({tp: OffsetSpec.latest() for tp in tps}, timeout_s)
        return {key: offset if offset >= 0 else high[key] for key, offset in found.items()}

    def list_groups(self, timeout_s: float = 10.0) -> list[str]:
        try:
            listed = self._admin.list_consumer_groups(request_timeout=timeout_s).result(
                timeout=timeout_s
            )
        except KafkaException as exc:
            raise TransportError(
                f"cannot list consumer groups on {self._settings.bootstrap_servers}: "
                f"{_error_text(exc)}"
            ) from exc
        return sorted(g.group_id for g in listed.valid)

    def describe_groups(
        self, group_ids: Sequence[str], timeout_s: float = 10.0
    ) -> list[GroupDescription]:
        if not group_ids:
            return []
        futures = self._admin.describe_consumer_groups(list(group_ids), request_timeout=timeout_s)
        out = []
        deadline = time.monotonic() + timeout_s
        for group_id in group_ids:
            future = futures[group_id]
            while True:
                try:
                    g = future.result(timeout=timeout_s)
                    break
                except KafkaException as exc:
                    err = _kafka_error(exc)
                    # a group's coordinator moving or still loading answers this for a moment
                    settling = err is not None and err.code() in _COORDINATOR_SETTLING
                    if settling and time.monotonic() < deadline:
                        time.sleep(0.2)
                        future = self._admin.describe_consumer_groups(
                            [group_id], request_timeout=timeout_s
                        )[group_id]
                        continue
                    raise TransportError(
                        f"cannot describe consumer group {group_id!r}: {_error_text(exc)}"
                    ) from exc
            members = tuple(
                GroupMember(
                    m.member_id,
                    m.client_id,
                    m.host,
                    tuple(
                        (tp.topic, tp.partition)
                        for tp in (m.assignment.topic_partitions if m.assignment else [])
                    ),
                )
                for m in g.members
            )
            out.append(GroupDescription(group_id, group_state_name(g.state), members))
        return out

    def group_offsets(self, group_id: str, timeout_s: float = 10.0) -> list[TopicPartitionOffset]:
        futures = self._admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=timeout_s
        )
        try:
            found = futures[group_id].result(timeout=timeout_s)
        except KafkaException as exc:
            raise TransportError(
                f"cannot read committed offsets of group {group_id!r}: {_error_text(exc)}"
            ) from exc
        committed = [
            TopicPartitionOffset(
                tp.topic, tp.partition, tp.offset, commit_metadata_text(tp.metadata)
            )
            for tp in found.topic_partitions or []
            if tp.error is None and tp.offset >= 0
        ]
        return sorted(committed, key=lambda o: (o.topic, o.partition))

    def close(self) -> None:
        self._client = None  # AdminClient has no close(); dropping it frees its threads


class ConfluentRecordProducer(RecordProducer):
    def __init__(
        self,
        settings: KafkaSettings,
        transactional_id: str | None,
        config: Mapping[str, Any] | None,
    ) -> None:
        self._settings = settings
        self._transactional_id = transactional_id
        self._config = _merged(settings, PRODUCER_DEFAULTS, config)
        if transactional_id is not None:
            self._config["transactional.id"] = transactional_id
        elif "message.timeout.ms" not in self._config:
            # Queued records must outlive an outage the window rides out; a transactional
            # producer's records are bounded by transaction.timeout.ms instead (librdkafka).
            self._config["message.timeout.ms"] = int((settings.outage_timeout + 60) * 1000)
        self._client: Producer | None = None
        self._initialised = False
        self._in_transaction = False  # begun, not yet committed or aborted
        self._stuck = False  # a call never returned: the client must not be used again
        self._failures: list[str] = []
        self._fatal: KafkaError | None = None

    @property
    def _producer(self) -> Producer:
        if self._client is None:
            try:
                self._client = Producer(
                    {**self._config, "error_cb": self._on_error, "on_delivery": self._on_delivery}
                )
            except KafkaException as exc:
                raise TransportError(
                    f"cannot create Kafka producer for {self._settings.bootstrap_servers}: "
                    f"{_error_text(exc)}"
                ) from exc
        return self._client

    @property
    def max_record_bytes(self) -> int:
        return int(self._config.get("message.max.bytes", LIBRDKAFKA_MESSAGE_MAX_BYTES))

    @property
    def record_limit_setting(self) -> str:
        return "message.max.bytes"

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = err
        else:
            log.debug("kafka producer: %s", err.str())

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        # Purged records belong to an aborted transaction: dropping them is the point.
        if err is not None and err.code() not in _PURGED:
            self._failures.append(
                f"delivery to {msg.topic()}[{msg.partition()}] failed: {err.name()}: {err.str()}"
            )

    def _raise_failures(self) -> None:
        if self._fatal is not None and self._fatal.code() in _FENCED:
            raise ProducerFencedError(
                fenced_message(
                    self._transactional_id,
                    self._settings.bootstrap_servers,
                    f"{self._fatal.name()}: {self._fatal.str()}",
                )
            )
        if self._fatal is not None:
            raise TransportError(
                f"Kafka producer for {self._settings.bootstrap_servers} failed fatally: "
                f"{self._fatal.name()}: {self._fatal.str()}"
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
        if self._failures or self._fatal is not None:
            self._raise_failures()
        kwargs: dict[str, Any] = {"key": key, "headers": headers}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, value, **kwargs)
                return
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain it
            except KafkaException as exc:
                raise TransportError(
                    f"cannot produce to {topic}[{partition if partition is not None else 'any'}]: "
                    f"{_error_text(exc)}"
                ) from exc

    def flush(self, timeout_s: float = 30.0) -> None:
        if self._client is None:
            return
        try:
            remaining = self._client.flush(timeout_s)
        except (KafkaException, SystemError) as exc:
            # A fatal error surfaces from flush itself; the client wraps it in a SystemError when
            # it arrives while a delivery callback runs, the KafkaException as its cause.
            self._raise_flush_error(exc)
        self._raise_failures()
        if remaining:
            # still queued, not lost: the idempotent producer delivers them once a broker answers
            raise BrokerUnavailableError(
                f"{remaining} record(s) not acknowledged by {self._settings.bootstrap_servers} "
                f"within {timeout_s:g}s"
            )

    def _raise_flush_error(self, exc: BaseException) -> NoReturn:
        cause = exc if isinstance(exc, KafkaException) else exc.__cause__ or exc.__context__
        err = _kafka_error(cause)
        if err is None:
            # The client sometimes reports a fatal error as a bare SystemError with no cause
            # (seen for a fenced transactional producer); the error callback still says which.
            if self._client is not None and self._fatal is None:
                with contextlib.suppress(KafkaException, SystemError):
                    self._client.poll(0)
            err = self._fatal or self._transaction_fatal_error()
        if err is not None and err.code() in _FENCED:
            raise ProducerFencedError(
                fenced_message(
                    self._transactional_id,
                    self._settings.bootstrap_servers,
                    f"flush: {err.name()}: {err.str()}",
                )
            ) from exc
        reason = f"{err.name()}: {err.str()}" if err is not None else None
        raise TransportError(
            f"flush to {self._settings.bootstrap_servers} failed: "
            f"{reason or _error_text(cause or exc)}"
        ) from exc

    def _transaction_fatal_error(self) -> KafkaError | None:
        """The fatal error of an open transaction's producer, if it has one. A transactional call
        made in the wrong state is refused without side effects, unless the producer failed
        fatally: then every such call answers with that fatal error (librdkafka)."""
        if self._client is None or not self._in_transaction:
            return None
        try:
            self._client.begin_transaction()  # inside a transaction: refused either way
        except KafkaException as exc:
            err = _kafka_error(exc)
            return err if err is not None and err.fatal() else None
        except SystemError:
            return None
        return None

    def _transactional(self, step: str, action: Callable[[Producer], None]) -> None:
        if self._transactional_id is None:
            raise TransportError(f"{step} needs a producer opened with a transactional_id")
        producer = self._producer
        try:
            if not self._initialised:
                producer.init_transactions(30.0)
                self._initialised = True
            action(producer)
        except KafkaException as exc:
            err = _kafka_error(exc)
            if err is not None and err.code() in _FENCED:
                raise ProducerFencedError(
                    fenced_message(
                        self._transactional_id,
                        self._settings.bootstrap_servers,
                        f"transaction {step}: {_error_text(exc)}",
                    )
                ) from exc
            raise TransactionError(
                f"transaction {step} failed for transactional.id {self._transactional_id!r} on "
                f"{self._settings.bootstrap_servers}: {_error_text(exc)}",
                requires_abort=bool(err and err.txn_requires_abort()),
                retriable=bool(err and not err.fatal() and (err.retriable() or _unavailable(exc))),
            ) from exc
        self._raise_failures()

    def begin_transaction(self) -> None:
        self._transactional("begin", lambda p: p.begin_transaction())
        self._in_transaction = True

    def send_offsets_to_transaction(
        self, offsets: Sequence[TopicPartitionOffset], group_metadata: Any, timeout_s: float = 30.0
    ) -> None:
        tps = [_to_tp(o) for o in offsets]
        # librdkafka can block in this call past its timeout when the group coordinator went
        # away and came back (confluentinc/librdkafka#5456): a producer stuck in it is given up
        # (see abort_transaction).
        try:
            bounded_call(
                f"transaction send_offsets for transactional.id {self._transactional_id!r} on "
                f"{self._settings.bootstrap_servers}",
                lambda: self._transactional(
                    "send_offsets",
                    lambda p: p.send_offsets_to_transaction(tps, group_metadata, timeout_s),  # type: ignore[call-arg]
                ),
                timeout_s,
            )
        except StuckCallError:
            self._stuck = True
            raise

    def commit_transaction(self, timeout_s: float = 30.0) -> None:
        self._transactional("commit", lambda p: p.commit_transaction(timeout_s))
        self._in_transaction = False

    def reclaim(self) -> None:
        client, self._client = self._client, None
        self._initialised, self._stuck, self._fatal = False, False, None
        self._in_transaction, self._failures = False, []
        if client is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                client.purge()  # a fenced client flushes nothing

    def abort_transaction(self, timeout_s: float = 30.0) -> None:
        self._failures = []  # records of an aborted transaction are discarded on purpose
        self._in_transaction = False
        if self._fatal is not None and self._fatal.code() in _FENCED:
            # never replaced: a new producer with this id would fence the process that took over
            self._raise_failures()
        if not self._stuck and self._fatal is None:
            try:
                self._transactional("abort", lambda p: p.abort_transaction(timeout_s))
                return
            except TransactionError as exc:
                if isinstance(exc, FencedError):
                    raise  # never replaced: a new producer would fence the one that took over
                if exc.retriable or self._fatal is None and not _is_fatal(exc.__cause__):
                    raise
        # A producer stuck inside a call, or failed fatally (after an outage the broker may
        # answer INVALID_TXN_STATE), takes no more calls. A new producer with the same
        # transactional.id fences it when it initialises, and the broker aborts the
        # transaction it left open: the abort this call promises.
        log.warning(
            "transactional producer %r is unusable (%s); replacing it: its open transaction is "
            "aborted when the new one initialises",
            self._transactional_id,
            "stuck in a call" if self._stuck else f"fatal: {self._fatal and self._fatal.str()}",
        )
        self._client, self._initialised, self._stuck, self._fatal = None, False, False, None

    def close(self) -> None:
        if self._client is not None:
            try:
                if not self._stuck and self._fatal is None:  # an unusable client flushes nothing
                    self.flush()
            finally:
                self._client = None


class ConfluentRecordConsumer(RecordConsumer):
    def __init__(
        self,
        settings: KafkaSettings,
        group_id: str,
        topics: Sequence[str],
        from_beginning: bool,
        config: Mapping[str, Any] | None,
        unreachable_timeout_s: float | None,
    ) -> None:
        self._settings = settings
        self._topics = list(topics)
        self._group_id = group_id
        self._config = _merged(
            settings,
            {
                **CONSUMER_DEFAULTS,
                "group.id": group_id,
                "auto.offset.reset": "earliest" if from_beginning else "latest",
            },
            config,
        )
        self._window = kafka_outage_window(settings, unreachable_timeout_s)
        self._client: Consumer | None = None
        self._suspect = False  # librdkafka said all brokers are down; a probe confirms it
        self._last_error = ""
        self._fatal: KafkaError | None = None
        self._pending_seeks: dict[tuple[str, int], _SeekSpec] = {}
        self._pending_all: _SeekSpec | None = None
        self._revoked: set[tuple[str, int]] = set()
        # librdkafka runs one rebalance protocol per consumer, set by its assignors (a list
        # mixing eager and cooperative ones is refused); confluent-kafka does not expose it
        self._cooperative = "cooperative" in str(
            self._config.get("partition.assignment.strategy", "")
        )

    @property
    def _consumer(self) -> Consumer:
        if self._client is None:
            try:
                client = Consumer({**self._config, "error_cb": self._on_error})
                client.subscribe(
                    self._topics,
                    on_assign=self._on_assign,
                    on_revoke=self._on_revoke,
                    on_lost=self._on_revoke,
                )
            except KafkaException as exc:
                raise TransportError(
                    f"cannot subscribe to {self._topics} on {self._settings.bootstrap_servers}: "
                    f"{_error_text(exc)}"
                ) from exc
            self._client = client
        return self._client

    def _on_error(self, err: KafkaError) -> None:
        self._last_error = f"{err.name()}: {err.str()}"
        if err.fatal():
            self._fatal = err
        elif err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._suspect = True

    def _resolve(self, consumer: Consumer, topic: str, partition: int, spec: _SeekSpec) -> int:
        kind, value = spec
        if kind == "offset":
            return value
        if kind == "beginning":
            return OFFSET_BEGINNING
        try:
            (found,) = consumer.offsets_for_times([TopicPartition(topic, partition, value)], 10.0)
        except KafkaException as exc:
            raise TransportError(
                f"cannot look up offset for timestamp {value} in {topic}[{partition}]: "
                f"{_error_text(exc)}"
            ) from exc
        return found.offset if found.offset >= 0 else OFFSET_END

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        spec_all, self._pending_all = self._pending_all, None
        for tp in partitions:
            spec = self._pending_seeks.pop((tp.topic, tp.partition), None) or spec_all
            if spec is not None:
                tp.offset = self._resolve(consumer, tp.topic, tp.partition, spec)
        if partitions:
            log.info(
                "group %s: assigned %s",
                self._group_id,
                sorted((tp.topic, tp.partition) for tp in partitions),
            )
        # Under a cooperative assignor (cooperative-sticky) `partitions` is only what this
        # rebalance adds: assign() would replace the whole assignment with it.
        if self._cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Called inside poll(), for revoked and for lost partitions (a lost one may already have
        # a new owner). Records of them fetched but not handed out are dropped by librdkafka; the
        # caller learns which it lost through take_revoked(), even when one comes back in the
        # same poll: it is then read again from the group's committed offset.
        self._revoked |= {(tp.topic, tp.partition) for tp in partitions}
        if partitions:
            log.info(
                "group %s: revoked %s",
                self._group_id,
                sorted((tp.topic, tp.partition) for tp in partitions),
            )
        if self._cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()

    def take_revoked(self) -> set[tuple[str, int]]:
        revoked, self._revoked = self._revoked, set()
        return revoked

    def rejoin(self) -> None:
        if self._client is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                self._revoked |= set(self.assignment())
        # a fenced client's close may fail (its membership is gone): it is dropped either way
        self.close()
        self._fatal = None
        self._pending_seeks.clear()
        self._pending_all = None

    def _fenced(self, err: KafkaError) -> ConsumerFencedError | None:
        """The fence a consumer error means, if it is one: a newer member with this one's
        group.instance.id (librdkafka reports it as a fatal error or on a message)."""
        if err.code() != KafkaError.FENCED_INSTANCE_ID and "Static consumer fenced" not in (
            err.str() or ""
        ):
            return None
        return ConsumerFencedError(
            f"fenced: another process joined consumer group {self._group_id!r} "
            f"with this one's group.instance.id and took over; this one commits "
            f"nothing more ({err.name()}: {err.str()})"
        )

    def _check_reachable(self) -> None:
        if self._fatal is not None:
            fence = self._fenced(self._fatal)
            if fence is not None:
                raise fence
            raise TransportError(
                f"Kafka consumer for {self._settings.bootstrap_servers} failed fatally: "
                f"{self._fatal.name()}: {self._fatal.str()}"
            )
        if not self._suspect and not self._window.down:
            return
        # librdkafka reconnects by itself; the probe only tells the window whether it has
        try:
            self._consumer.list_topics(timeout=min(1.0, self._window.timeout_s))
        except KafkaException as exc:
            # raises OutageError once the outage is older than the window
            self._window.failed(self._last_error or _error_text(exc))
            return
        self._suspect = False
        self._window.succeeded()

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        consumer = self._consumer
        try:
            messages = consumer.consume(max_records, timeout_s)
        except KafkaException as exc:
            err = _kafka_error(exc)
            fence = self._fenced(err) if err is not None else None
            if fence is not None:
                raise fence from exc
            raise TransportError(
                f"poll of {self._topics} on {self._settings.bootstrap_servers} failed: "
                f"{_error_text(exc)}"
            ) from exc
        if not messages:
            self._check_reachable()
            return []
        self._suspect = False
        self._window.succeeded()
        records: list[Record] = []
        for m in messages:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.code() == KafkaError._MAX_POLL_EXCEEDED:
                    # the member left its group while the application worked; this poll rejoins
                    # it, and the group's committed offsets say where reading resumes
                    log.warning(
                        "%s: left the consumer group after working past max.poll.interval.ms; "
                        "rejoining",
                        self._topics,
                    )
                    continue
                fence = self._fenced(err)
                if fence is not None:
                    raise fence
                raise TransportError(
                    f"consuming {m.topic()}[{m.partition()}] failed: {err.name()}: {err.str()}"
                )
            records.append(
                # a message without error always has these set; the casts cost nothing per record
                Record(
                    topic=cast(str, m.topic()),
                    partition=cast(int, m.partition()),
                    offset=cast(int, m.offset()),
                    key=cast("bytes | None", m.key()),
                    value=cast("bytes | None", m.value()),
                    headers=cast(Headers, m.headers() or []),
                    timestamp_ms=m.timestamp()[1],
                )
            )
        return records

    def commit(self, offsets: Sequence[TopicPartitionOffset]) -> None:
        if not offsets:
            return
        tps = [_to_tp(o) for o in offsets]
        where = ", ".join(f"{o.topic}[{o.partition}]@{o.offset}" for o in offsets)
        try:
            result = self._consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:
            error = BrokerUnavailableError if _unavailable(exc) else TransportError
            raise error(f"commit of {where} failed: {_error_text(exc)}") from exc
        for tp in result or []:
            if tp.error is not None:
                raise TransportError(
                    f"commit of {tp.topic}[{tp.partition}] failed: {tp.error.str()}"
                )

    def committed(self, timeout_s: float = 10.0) -> list[TopicPartitionOffset]:
        consumer = self._consumer
        try:
            partitions = [
                TopicPartition(topic, p)
                for topic in self._topics
                for p in sorted(consumer.list_topics(topic, timeout_s).topics[topic].partitions)
            ]
            found = consumer.committed(partitions, timeout=timeout_s) if partitions else []
        except KafkaException as exc:
            raise TransportError(
                f"reading committed offsets of {self._topics} failed: {_error_text(exc)}"
            ) from exc
        return [
            TopicPartitionOffset(
                tp.topic, tp.partition, tp.offset, commit_metadata_text(tp.metadata)
            )
            for tp in found
            if tp.error is None and tp.offset >= 0
        ]

    def group_metadata(self) -> Any:
        return self._consumer.consumer_group_metadata()

    def assignment(self) -> list[tuple[str, int]]:
        return [(tp.topic, tp.partition) for tp in self._consumer.assignment()]

    def _seek_assigned(self, spec_for: dict[tuple[str, int], _SeekSpec]) -> None:
        consumer = self._consumer
        for (topic, partition), spec in spec_for.items():
            offset = self._resolve(consumer, topic, partition, spec)
            try:
                consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as exc:
                raise TransportError(
                    f"seek of {topic}[{partition}] to {offset} failed: {_error_text(exc)}"
                ) from exc

    def seek(self, topic: str, partition: int, offset: int) -> None:
        if (topic, partition) in self.assignment():
            self._seek_assigned({(topic, partition): ("offset", offset)})
        else:
            self._pending_seeks[(topic, partition)] = ("offset", offset)

    def _seek_all(self, spec: _SeekSpec) -> None:
        assigned = self.assignment()
        if assigned:
            self._seek_assigned({tp: spec for tp in assigned})
        else:
            self._pending_all = spec

    def seek_to_beginning(self, partitions: Sequence[tuple[str, int]] | None = None) -> None:
        if partitions is None:
            self._seek_all(("beginning", 0))
            return
        held = set(self.assignment())
        for tp in partitions:
            if tp in held:
                self._seek_assigned({tp: ("beginning", 0)})
            else:
                self._pending_seeks[tp] = ("beginning", 0)

    def seek_to_timestamp(self, timestamp_ms: int) -> None:
        self._seek_all(("timestamp", timestamp_ms))

    def positions(self) -> dict[tuple[str, int], int]:
        consumer = self._consumer
        try:
            found = consumer.position(consumer.assignment())
        except KafkaException as exc:
            raise TransportError(
                f"cannot read positions in {self._topics}: {_error_text(exc)}"
            ) from exc
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            try:
                client.close()
            except (KafkaException, RuntimeError) as exc:
                log.warning("closing Kafka consumer of %s: %s", self._topics, exc)


class ConfluentBackend(KafkaBackend):
    """confluent-kafka clients for one cluster."""

    def admin(self) -> TopicAdmin:
        return ConfluentTopicAdmin(self.settings)

    def producer(
        self, transactional_id: str | None = None, config: Mapping[str, Any] | None = None
    ) -> RecordProducer:
        return ConfluentRecordProducer(self.settings, transactional_id, config)

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
            # librdkafka's queue of fetched records, and each fetch's share of it
            config = {
                "queued.max.messages.kbytes": max(prefetch_bytes // 1024, 1),
                "fetch.max.bytes": max(prefetch_bytes, 1 << 20),
                "max.partition.fetch.bytes": max(prefetch_bytes // 4, 1 << 20),
                **(config or {}),
            }
        return ConfluentRecordConsumer(
            self.settings, group_id, topics, from_beginning, config, unreachable_timeout_s
        )


@KAFKA_BACKENDS.register("confluent")
def confluent_backend(settings: KafkaSettings) -> KafkaBackend:
    return ConfluentBackend(settings)
