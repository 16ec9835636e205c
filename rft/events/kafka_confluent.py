"""The confluent-kafka (librdkafka) backend of the event plane: the only module importing it.

Owns librdkafka's client calls, its settings and defaults, and how its errors read (which codes
mean fenced, unavailable, settling): AdminClient, Producer and Consumer under the policy that
`rft.events.kafka_core` writes once for every backend (seeks, rejoin, transactions, outage
window, close and flush). Every client error leaves as TransportError with the broker, topic and
partition it concerns.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
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
from rft.errors import TransportError
from rft.events.kafka_core import (
    ClientErrors,
    CoreBackend,
    CoreRecordConsumer,
    CoreRecordProducer,
    CoreTopicAdmin,
    OffsetQuery,
    Partition,
    SeekSpec,
    group_config,
    undelivered_expiry_ms,
)
from rft.events.transport import (
    KAFKA_BACKENDS,
    ConsumerFencedError,
    GroupDescription,
    GroupMember,
    Headers,
    KafkaBackend,
    PartitionInfo,
    ProducerFencedError,
    Record,
    TopicInfo,
    TopicPartitionOffset,
    TopicSpec,
    commit_metadata_text,
    fenced_message,
    group_state_name,
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


def _unavailable(exc: BaseException) -> bool:
    err = _kafka_error(exc)
    return err is not None and not err.fatal() and err.code() in _UNAVAILABLE


def _consumer_fenced(err: KafkaError) -> bool:
    """A newer member with this consumer's group.instance.id took over."""
    return err.code() == KafkaError.FENCED_INSTANCE_ID or "Static consumer fenced" in (
        err.str() or ""
    )


class _ConfluentErrors(ClientErrors):
    types = (KafkaException,)

    def describe(self, exc: BaseException) -> str:
        return _error_text(exc)

    def unavailable(self, exc: BaseException) -> bool:
        return _unavailable(exc)

    def fatal(self, exc: BaseException | None) -> bool:
        return _is_fatal(exc)

    def producer_fenced(self, exc: BaseException) -> bool:
        err = _kafka_error(exc)
        return err is not None and err.code() in _FENCED

    def consumer_fenced(self, exc: BaseException) -> bool:
        err = _kafka_error(exc)
        return err is not None and _consumer_fenced(err)

    def requires_abort(self, exc: BaseException) -> bool:
        err = _kafka_error(exc)
        return bool(err and err.txn_requires_abort())

    def retriable(self, exc: BaseException) -> bool:
        err = _kafka_error(exc)
        return bool(err and not err.fatal() and (err.retriable() or _unavailable(exc)))


ERRORS = _ConfluentErrors()


def _merged(settings: KafkaSettings, defaults: Mapping[str, Any], config: Mapping[str, Any] | None):
    merged: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers,
        "logger": _LIBRDKAFKA_LOG,
        **defaults,
    }
    merged.update(settings.extra)
    merged.update(config or {})
    return merged


def _offset_spec(query: OffsetQuery) -> OffsetSpec:
    if query == "earliest":
        return OffsetSpec.earliest()
    if query == "latest":
        return OffsetSpec.latest()
    return OffsetSpec.for_timestamp(int(query))


def _to_tp(o: TopicPartitionOffset) -> TopicPartition:
    if o.metadata:
        return TopicPartition(o.topic, o.partition, o.offset, metadata=o.metadata)
    return TopicPartition(o.topic, o.partition, o.offset)


class ConfluentTopicAdmin(CoreTopicAdmin):
    errors = ERRORS

    def __init__(self, settings: KafkaSettings) -> None:
        super().__init__(settings)
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

    def _create_now(self, specs: Sequence[TopicSpec], timeout_s: float) -> list[str]:
        futures = self._admin.create_topics(
            [
                NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.configs))
                for s in specs
            ],
            operation_timeout=timeout_s,
            request_timeout=timeout_s,
        )
        created: list[str] = []
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
        return created

    def _leaderless(self, names: Sequence[str], timeout_s: float) -> list[str]:
        topics = self._metadata(timeout_s).topics
        return [
            n
            for n in names
            if n not in topics
            or topics[n].error is not None
            or not topics[n].partitions
            or any(p.leader < 0 for p in topics[n].partitions.values())
        ]

    def list_topics(self, timeout_s: float = 10.0) -> list[str]:
        return sorted(t for t in self._metadata(timeout_s).topics if not t.startswith("__"))

    def describe_topics(self, names: Sequence[str], timeout_s: float = 10.0) -> list[TopicInfo]:
        topics = self._metadata(timeout_s).topics
        self._refuse_missing([n for n in names if n not in topics or topics[n].error is not None])
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

    def _partitions(self, topics: Sequence[str], timeout_s: float) -> list[Partition]:
        known = self._metadata(timeout_s).topics
        self._refuse_missing([t for t in topics if t not in known or known[t].error is not None])
        return [(t, p) for t in topics for p in sorted(known[t].partitions)]

    def _list_offsets(
        self, queries: Mapping[Partition, OffsetQuery], timeout_s: float, committed: bool = False
    ) -> dict[Partition, int]:
        specs = {TopicPartition(t, p): _offset_spec(q) for (t, p), q in queries.items()}
        if not specs:
            return {}
        level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        deadline = time.monotonic() + timeout_s
        out: dict[Partition, int] = {}
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


class ConfluentRecordProducer(CoreRecordProducer[Producer]):
    errors = ERRORS

    def __init__(
        self,
        settings: KafkaSettings,
        transactional_id: str | None,
        config: Mapping[str, Any] | None,
    ) -> None:
        super().__init__(settings, transactional_id)
        self._config = _merged(settings, PRODUCER_DEFAULTS, config)
        if transactional_id is not None:
            self._config["transactional.id"] = transactional_id
        elif "message.timeout.ms" not in self._config:
            # a transactional producer's records are bounded by transaction.timeout.ms instead
            self._config["message.timeout.ms"] = undelivered_expiry_ms(settings)
        self._fatal: KafkaError | None = None

    def _open(self) -> Producer:
        return Producer(
            {
                **self._config,
                "error_cb": self._while_current(self._on_error),
                "on_delivery": self._while_current(self._on_delivery),
            }
        )

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
            self._delivery_failed(msg.topic(), msg.partition(), f"{err.name()}: {err.str()}")

    def _fence_detail(self) -> str | None:
        if self._fatal is not None and self._fatal.code() in _FENCED:
            return f"{self._fatal.name()}: {self._fatal.str()}"
        return None

    def _fatal_detail(self) -> str | None:
        if self._fatal is not None and self._fatal.code() not in _FENCED:
            return f"{self._fatal.name()}: {self._fatal.str()}"
        return None

    def _forget_fatal(self) -> None:
        self._fatal = None

    def _send_now(
        self,
        client: Producer,
        topic: str,
        value: bytes,
        key: bytes | None,
        headers: Headers | None,
        partition: int | None,
    ) -> None:
        kwargs: dict[str, Any] = {"key": key, "headers": headers}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                client.produce(topic, value, **kwargs)
                return
            except BufferError:
                client.poll(0.05)  # local queue full: let deliveries drain it

    def _flush_now(self, client: Producer, timeout_s: float) -> str | None:
        try:
            remaining = client.flush(timeout_s)
        except (KafkaException, SystemError) as exc:
            # A fatal error surfaces from flush itself; the client wraps it in a SystemError when
            # it arrives while a delivery callback runs, the KafkaException as its cause.
            self._raise_flush_error(exc)
        return f"{remaining} record(s)" if remaining else None

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

    def _init_now(self, client: Producer) -> None:
        client.init_transactions(30.0)

    def _begin_now(self, client: Producer) -> None:
        client.begin_transaction()

    def _send_offsets_now(
        self,
        client: Producer,
        offsets: Sequence[TopicPartitionOffset],
        group_metadata: Any,
        timeout_s: float,
    ) -> None:
        tps = [_to_tp(o) for o in offsets]
        client.send_offsets_to_transaction(tps, group_metadata, timeout_s)  # type: ignore[call-arg]

    def _commit_now(self, client: Producer, timeout_s: float) -> None:
        client.commit_transaction(timeout_s)

    def _abort_now(self, client: Producer, timeout_s: float) -> None:
        client.abort_transaction(timeout_s)

    def _discard(self, client: Producer, stuck: bool) -> None:
        if not stuck:  # a call of a stuck client may still run: leave its queues to it
            with contextlib.suppress(KafkaException, RuntimeError):
                client.purge()  # a fenced or failed client flushes nothing

    def _close_client(self, client: Producer) -> None:
        pass  # a Producer has no close(); dropping it frees its threads


class ConfluentRecordConsumer(CoreRecordConsumer[Consumer]):
    errors = ERRORS

    def __init__(
        self,
        settings: KafkaSettings,
        group_id: str,
        topics: Sequence[str],
        from_beginning: bool,
        config: Mapping[str, Any] | None,
        unreachable_timeout_s: float | None,
    ) -> None:
        super().__init__(settings, group_id, topics, unreachable_timeout_s)
        self._config = _merged(
            settings, {**CONSUMER_DEFAULTS, **group_config(group_id, from_beginning)}, config
        )
        self._last_error = ""
        self._fatal: KafkaError | None = None
        # librdkafka runs one rebalance protocol per consumer, set by its assignors (a list
        # mixing eager and cooperative ones is refused); confluent-kafka does not expose it
        self._cooperative = "cooperative" in str(
            self._config.get("partition.assignment.strategy", "")
        )

    def _open(self) -> Consumer:
        client = Consumer({**self._config, "error_cb": self._on_error})
        client.subscribe(
            self._topics,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )
        return client

    def _on_error(self, err: KafkaError) -> None:
        self._last_error = f"{err.name()}: {err.str()}"
        if err.fatal():
            self._fatal = err
        elif err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._suspect = True

    def _forget_fatal(self) -> None:
        self._fatal = None

    def _resolve(self, consumer: Consumer, topic: str, partition: int, spec: SeekSpec) -> int:
        kind, value = spec
        if kind == "offset":
            return value
        if kind == "beginning":
            return OFFSET_BEGINNING
        with self._calling(f"cannot look up offset for timestamp {value} in {topic}[{partition}]"):
            (found,) = consumer.offsets_for_times([TopicPartition(topic, partition, value)], 10.0)
        return found.offset if found.offset >= 0 else OFFSET_END

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        specs = self._assigned_now((tp.topic, tp.partition) for tp in partitions)
        for tp in partitions:
            spec = specs.get((tp.topic, tp.partition))
            if spec is not None:
                tp.offset = self._resolve(consumer, tp.topic, tp.partition, spec)
        # Under a cooperative assignor (cooperative-sticky) `partitions` is only what this
        # rebalance adds: assign() would replace the whole assignment with it.
        if self._cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        self._pause_assigned((tp.topic, tp.partition) for tp in partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._revoked_now((tp.topic, tp.partition) for tp in partitions)
        if self._cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()

    def _fence_of(self, err: KafkaError) -> ConsumerFencedError | None:
        """The fence a consumer error means, if it is one (librdkafka reports it as a fatal error
        or on a message)."""
        return self._fence(f"{err.name()}: {err.str()}") if _consumer_fenced(err) else None

    def _raise_if_failed(self) -> None:
        if self._fatal is None:
            return
        fence = self._fence_of(self._fatal)
        if fence is not None:
            raise fence
        raise TransportError(
            f"Kafka consumer for {self._settings.bootstrap_servers} failed fatally: "
            f"{self._fatal.name()}: {self._fatal.str()}"
        )

    def _unreachable(self, client: Consumer) -> str | None:
        try:
            client.list_topics(timeout=min(1.0, self._window.timeout_s))
        except KafkaException as exc:
            return self._last_error or _error_text(exc)
        return None

    def _fetch_now(self, client: Consumer, max_records: int, timeout_s: float) -> Any:
        return client.consume(max_records, timeout_s)

    def _records(self, fetched: Any) -> list[Record]:
        records: list[Record] = []
        for m in fetched:
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
                fence = self._fence_of(err)
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

    def _commit_now(self, client: Consumer, offsets: Sequence[TopicPartitionOffset]) -> None:
        result = client.commit(offsets=[_to_tp(o) for o in offsets], asynchronous=False)
        for tp in result or []:
            if tp.error is not None:
                raise TransportError(
                    f"commit of {tp.topic}[{tp.partition}] failed: {tp.error.str()}"
                )

    def _committed_now(self, client: Consumer, timeout_s: float) -> list[TopicPartitionOffset]:
        partitions = [
            TopicPartition(topic, p)
            for topic in self._topics
            for p in sorted(client.list_topics(topic, timeout_s).topics[topic].partitions)
        ]
        found = client.committed(partitions, timeout=timeout_s) if partitions else []
        return [
            TopicPartitionOffset(
                tp.topic, tp.partition, tp.offset, commit_metadata_text(tp.metadata)
            )
            for tp in found
            if tp.error is None and tp.offset >= 0
        ]

    def _group_metadata_now(self, client: Consumer) -> Any:
        return client.consumer_group_metadata()

    def _assignment_now(self, client: Consumer) -> list[tuple[str, int]]:
        return [(tp.topic, tp.partition) for tp in client.assignment()]

    def _seek_now(self, client: Consumer, specs: Mapping[tuple[str, int], SeekSpec]) -> None:
        for (topic, partition), spec in specs.items():
            client.seek(
                TopicPartition(topic, partition, self._resolve(client, topic, partition, spec))
            )

    def _positions_now(self, client: Consumer) -> dict[tuple[str, int], int]:
        found = client.position(client.assignment())
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}

    def _pause_now(
        self, client: Consumer, partitions: Sequence[tuple[str, int]], paused: bool
    ) -> None:
        tps = [TopicPartition(t, p) for t, p in partitions]
        if paused:
            client.pause(tps)
        else:
            client.resume(tps)

    def _close_client(self, client: Consumer) -> None:
        client.close()


class ConfluentBackend(CoreBackend):
    """confluent-kafka clients for one cluster."""

    admin_type = ConfluentTopicAdmin
    producer_type = ConfluentRecordProducer
    consumer_type = ConfluentRecordConsumer

    def _prefetch_config(self, prefetch_bytes: int) -> dict[str, Any]:
        # librdkafka also keeps a queue of fetched records, beside each fetch's share of it
        return {
            **super()._prefetch_config(prefetch_bytes),
            "queued.max.messages.kbytes": max(prefetch_bytes // 1024, 1),
        }


@KAFKA_BACKENDS.register("confluent")
def confluent_backend(settings: KafkaSettings) -> KafkaBackend:
    return ConfluentBackend(settings)
