"""The kafka-python backend of the event plane: the only module importing `kafka`.

Wraps KafkaAdminClient, KafkaProducer and KafkaConsumer behind `rft.events.transport`'s
interfaces. Config keys arrive Java-style (`linger.ms`) and are mapped to kafka-python's names
(`linger_ms`); a key no kafka-python client knows is a ConfigError naming it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, OffsetSpec
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.errors import (
    FencedInstanceIdError,
    InvalidProducerEpochError,
    KafkaError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
    TransactionAbortedError,
    UnknownTopicOrPartitionError,
)
from kafka.errors import ProducerFencedError as ProducerFencedError_
from kafka.structs import OffsetAndMetadata, TopicPartition

from rft.config.connections import KafkaSettings
from rft.errors import BrokerUnavailableError, ConfigError, TransportError
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

# Seconds a transactional producer may go on failing to deliver before it is given up and replaced
# (its transaction aborted; the caller redoes its step on a new producer).
TRANSACTIONAL_STALL_S = 60.0

# kafka-python logs every connection step at INFO; keep it to warnings unless the user set a level.
if logging.getLogger("kafka").level == logging.NOTSET:
    logging.getLogger("kafka").setLevel(logging.WARNING)

PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "max.request.size": 16 * 1024 * 1024,
    # a restarted broker is tried again within seconds, as the outage window's own retries are
    # (kafka-python's backoff grows to 30 s by default: a producer took 113 s to reconnect)
    "reconnect.backoff.max.ms": 5000,
}

CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "isolation.level": "read_committed",
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "reconnect.backoff.max.ms": 5000,
}

_KNOWN_KEYS = (
    set(KafkaProducer.DEFAULT_CONFIG)
    | set(KafkaConsumer.DEFAULT_CONFIG)
    | set(KafkaAdminClient.DEFAULT_CONFIG)
)


def _client_config(
    known: Mapping[str, Any],
    settings: KafkaSettings,
    defaults: Mapping[str, Any],
    config: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Java-style keys -> kafka-python kwargs for one client class (`known` = its DEFAULT_CONFIG).

    A key meant for another client class is skipped, as librdkafka does; a key no class knows is
    an error rather than a silent no-op.
    """
    merged: dict[str, Any] = {**defaults, **settings.extra, **(config or {})}
    out: dict[str, Any] = {"bootstrap_servers": settings.bootstrap_servers.split(",")}
    for key, value in merged.items():
        name = key.replace(".", "_")
        if name == "partition_assignment_strategy":
            value = _assignors(value)
        if name not in _KNOWN_KEYS:
            raise ConfigError(
                f"stack.kafka.extra: {key!r} is not a kafka-python setting (client kafka-python)"
            )
        if name in known:
            if isinstance(known[name], int) and isinstance(value, str) and value.isdigit():
                value = int(value)  # stack.kafka.extra holds librdkafka-style strings
            out[name] = value
    return out


_ASSIGNORS = {
    a.name: a
    for a in (RangePartitionAssignor, RoundRobinPartitionAssignor, CooperativeStickyAssignor)
}


def _assignors(value: Any) -> tuple[Any, ...]:
    """librdkafka's comma-separated assignor names (`cooperative-sticky`) as kafka-python's
    assignor classes; classes pass through."""
    if not isinstance(value, str):
        return tuple(value)
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in _ASSIGNORS]
    if unknown or not names:
        raise ConfigError(
            f"partition.assignment.strategy: {value!r} names no kafka-python assignor "
            f"(known: {', '.join(sorted(_ASSIGNORS))})"
        )
    return tuple(_ASSIGNORS[n] for n in names)


class KafkaPythonTopicAdmin(TopicAdmin):
    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._client: KafkaAdminClient | None = None

    def _admin(self, timeout_s: float) -> KafkaAdminClient:
        """The admin client, created by the first call; that call's timeout also bounds its
        bootstrap (kafka-python's own default is 30 s), so an address nothing answers fails soon."""
        if self._client is None:
            bootstrap = {"bootstrap_timeout_ms": max(int(timeout_s * 1000), 1000)}
            try:
                self._client = KafkaAdminClient(
                    **_client_config(
                        KafkaAdminClient.DEFAULT_CONFIG, self._settings, bootstrap, None
                    )
                )
            except KafkaError as exc:
                raise TransportError(
                    f"Kafka at {self._settings.bootstrap_servers} unreachable: {exc!r}"
                ) from exc
        return self._client

    def create_topics(self, specs: Sequence[TopicSpec], timeout_s: float = 30.0) -> list[str]:
        if not specs:
            return []
        existing = set(self.list_topics(timeout_s))
        wanted = [s for s in specs if s.name not in existing]
        created: list[str] = []
        for spec in wanted:
            try:
                self._admin(timeout_s).create_topics(
                    {
                        spec.name: {
                            "num_partitions": spec.partitions,
                            "replication_factor": spec.replication_factor,
                            "configs": dict(spec.configs),
                        }
                    },
                    timeout_ms=int(timeout_s * 1000),
                )
                created.append(spec.name)
            except TopicAlreadyExistsError:
                continue  # another process created it between our check and request
            except KafkaError as exc:
                raise TransportError(
                    f"cannot create topic {spec.name!r} on {self._settings.bootstrap_servers}: "
                    f"{exc!r}"
                ) from exc
        try:
            self._admin(timeout_s).wait_for_topics(
                [s.name for s in specs], timeout_ms=int(timeout_s * 1000)
            )
        except KafkaError as exc:
            raise TransportError(
                f"topics {[s.name for s in specs]} not ready after {timeout_s:g}s: {exc!r}"
            ) from exc
        return sorted(created)

    def list_topics(self, timeout_s: float = 10.0) -> list[str]:
        try:
            return sorted(t for t in self._admin(timeout_s).list_topics() if not t.startswith("__"))
        except KafkaError as exc:
            raise TransportError(
                f"Kafka at {self._settings.bootstrap_servers} unreachable: {exc!r}"
            ) from exc

    def describe_topics(self, names: Sequence[str], timeout_s: float = 10.0) -> list[TopicInfo]:
        try:
            described = {t["name"]: t for t in self._admin(timeout_s).describe_topics(list(names))}
            configs = self._admin(timeout_s).describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, n) for n in names],
            )
        except KafkaError as exc:
            raise TransportError(f"cannot describe topics {list(names)}: {exc!r}") from exc
        missing = [n for n in names if n not in described or described[n].get("error_code")]
        if missing:
            raise TransportError(
                f"no such topic(s) on {self._settings.bootstrap_servers}: {', '.join(missing)}"
            )
        topic_configs = _topic_configs(configs)
        out = []
        for n in names:
            parts = sorted(described[n]["partitions"], key=lambda p: p["partition_index"])
            out.append(
                TopicInfo(
                    name=n,
                    partitions=[
                        PartitionInfo(
                            p["partition_index"],
                            p["leader_id"],
                            list(p["replica_nodes"]),
                            list(p["isr_nodes"]),
                        )
                        for p in parts
                    ],
                    configs=topic_configs.get(n, {}),
                )
            )
        return out

    def delete_topics(self, names: Sequence[str], timeout_s: float = 30.0) -> None:
        if not names:
            return
        try:
            self._admin(timeout_s).delete_topics(list(names), timeout_ms=int(timeout_s * 1000))
        except UnknownTopicOrPartitionError:
            return
        except KafkaError as exc:
            raise TransportError(f"cannot delete topics {list(names)}: {exc!r}") from exc

    def _partitions(self, topics: Sequence[str], timeout_s: float) -> list[TopicPartition]:
        try:
            described = {t["name"]: t for t in self._admin(timeout_s).describe_topics(list(topics))}
        except KafkaError as exc:
            raise TransportError(f"cannot describe topics {list(topics)}: {exc!r}") from exc
        missing = [t for t in topics if t not in described or described[t].get("error_code")]
        if missing:
            raise TransportError(
                f"no such topic(s) on {self._settings.bootstrap_servers}: {', '.join(missing)}"
            )
        return [
            TopicPartition(t, p)
            for t in topics
            for p in sorted(q["partition_index"] for q in described[t]["partitions"])
        ]

    def _list_offsets(
        self, specs: Mapping[TopicPartition, Any], timeout_s: float, committed: bool = False
    ) -> dict[tuple[str, int], int]:
        if not specs:
            return {}
        level = "read_committed" if committed else "read_uncommitted"
        try:
            found = self._admin(timeout_s).list_partition_offsets(
                dict(specs), isolation_level=level, timeout_ms=int(timeout_s * 1000)
            )
        except KafkaError as exc:
            where = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in specs)
            raise TransportError(f"cannot list offsets of {where}: {exc!r}") from exc
        return {(tp.topic, tp.partition): found[tp].offset for tp in specs}

    def partition_bounds(
        self, topics: Sequence[str], timeout_s: float = 10.0, committed: bool = False
    ) -> list[PartitionBounds]:
        tps = self._partitions(topics, timeout_s)
        low = self._list_offsets({tp: OffsetSpec.EARLIEST for tp in tps}, timeout_s)
        high = self._list_offsets({tp: OffsetSpec.LATEST for tp in tps}, timeout_s, committed)
        return [
            PartitionBounds(tp.topic, tp.partition, low[key], high[key])
            for tp in tps
            for key in [(tp.topic, tp.partition)]
        ]

    def offsets_for_timestamp(
        self, topics: Sequence[str], timestamp_ms: int, timeout_s: float = 10.0
    ) -> dict[tuple[str, int], int]:
        tps = self._partitions(topics, timeout_s)
        found = self._list_offsets({tp: int(timestamp_ms) for tp in tps}, timeout_s)
        high = self._list_offsets({tp: OffsetSpec.LATEST for tp in tps}, timeout_s)
        return {key: offset if offset >= 0 else high[key] for key, offset in found.items()}

    def list_groups(self, timeout_s: float = 10.0) -> list[str]:
        try:
            listed = self._admin(timeout_s).list_groups()
        except KafkaError as exc:
            raise TransportError(
                f"cannot list consumer groups on {self._settings.bootstrap_servers}: {exc!r}"
            ) from exc
        return sorted(g["group_id"] if isinstance(g, Mapping) else g[0] for g in listed)

    def describe_groups(
        self, group_ids: Sequence[str], timeout_s: float = 10.0
    ) -> list[GroupDescription]:
        if not group_ids:
            return []
        try:
            described = self._admin(timeout_s).describe_groups(list(group_ids))
        except KafkaError as exc:
            raise TransportError(
                f"cannot describe consumer groups {list(group_ids)}: {exc!r}"
            ) from exc
        out = []
        for group_id in group_ids:
            g = described.get(group_id) or {}
            members = tuple(
                GroupMember(
                    m.get("member_id", ""),
                    m.get("client_id", ""),
                    m.get("client_host", ""),
                    _assigned(m.get("member_assignment")),
                )
                for m in g.get("members", [])
            )
            out.append(
                GroupDescription(
                    group_id, group_state_name(g.get("group_state") or "Dead"), members
                )
            )
        return out

    def group_offsets(self, group_id: str, timeout_s: float = 10.0) -> list[TopicPartitionOffset]:
        try:
            found = self._admin(timeout_s).list_group_offsets({group_id: None}).get(group_id, {})
        except KafkaError as exc:
            raise TransportError(
                f"cannot read committed offsets of group {group_id!r}: {exc!r}"
            ) from exc
        committed = [
            TopicPartitionOffset(tp.topic, tp.partition, o.offset, commit_metadata_text(o.metadata))
            for tp, o in found.items()
            if o.offset is not None and o.offset >= 0
        ]
        return sorted(committed, key=lambda o: (o.topic, o.partition))

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()


def _assigned(assignment: Any) -> tuple[tuple[str, int], ...]:
    """(topic, partition) pairs of a decoded member assignment; () when it could not be decoded."""
    if not isinstance(assignment, Mapping):
        return ()
    return tuple(
        (entry["topic"], p)
        for entry in assignment.get("assigned_partitions", [])
        for p in entry["partitions"]
    )


def _topic_configs(described: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Topic name -> configs set on the topic itself, from a describe_configs answer."""
    return {
        name: {
            key: str(entry["value"])
            for key, entry in entries.items()
            if entry.get("config_source") == "DYNAMIC_TOPIC_CONFIG" and entry["value"] is not None
        }
        for name, entries in described.get("topic", {}).items()
    }


class KafkaPythonRecordProducer(RecordProducer):
    def __init__(
        self,
        settings: KafkaSettings,
        transactional_id: str | None,
        config: Mapping[str, Any] | None,
    ) -> None:
        self._settings = settings
        self._transactional_id = transactional_id
        self._config = _client_config(
            KafkaProducer.DEFAULT_CONFIG, settings, PRODUCER_DEFAULTS, config
        )
        if transactional_id is not None:
            self._config["transactional_id"] = transactional_id
        if "delivery.timeout.ms" not in {**settings.extra, **(config or {})}:
            # Queued records must outlive an outage the window rides out (kafka-python expires
            # them after 120 s by default: a trainer lost a metric, and another its announcement,
            # and exited, after a 12 s outage it took kafka-python two minutes to recover from)
            self._config["delivery_timeout_ms"] = int((settings.outage_timeout + 60) * 1000)
        self._client: KafkaProducer | None = None
        self._initialised = False
        self._failures: list[str] = []
        self._fenced: str | None = None  # a delivery refused because a newer producer took over
        self._stuck = False  # a call blocked past its bound: the client is replaced at abort
        self._undelivered_since: float | None = None  # first of consecutive timed-out flushes

    @property
    def _producer(self) -> KafkaProducer:
        if self._client is None:
            try:
                self._client = KafkaProducer(**self._config)
            except KafkaError as exc:
                raise TransportError(
                    f"cannot create Kafka producer for {self._settings.bootstrap_servers}: {exc!r}"
                ) from exc
        return self._client

    def _raise_failures(self) -> None:
        if self._fenced is not None:
            raise ProducerFencedError(
                fenced_message(
                    self._transactional_id, self._settings.bootstrap_servers, self._fenced
                )
            )
        if self._failures:
            first, count = self._failures[0], len(self._failures)
            self._failures = []
            raise TransportError(f"{first} ({count} record(s) failed)")

    @property
    def max_record_bytes(self) -> int:
        default = KafkaProducer.DEFAULT_CONFIG["max_request_size"]
        return int(self._config.get("max_request_size", default))

    @property
    def record_limit_setting(self) -> str:
        return "max.request.size"

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
        try:
            future = producer.send(
                topic, value=value, key=key, headers=headers or None, partition=partition
            )
        except KafkaError as exc:
            raise TransportError(
                f"cannot produce to {topic}[{partition if partition is not None else 'any'}]: "
                f"{exc!r}"
            ) from exc

        def failed(exc: BaseException) -> None:
            if isinstance(exc, TransactionAbortedError):
                return  # records of an aborted transaction are discarded on purpose
            if isinstance(exc, (ProducerFencedError_, InvalidProducerEpochError)):
                self._fenced = f"delivery to {topic}: {exc!r}"
            where = f"{topic}[{partition if partition is not None else 'any'}]"
            self._failures.append(f"delivery to {where} failed: {exc!r}")

        future.add_errback(failed)

    def flush(self, timeout_s: float = 30.0) -> None:
        if self._client is None:
            return
        try:
            self._client.flush(timeout=timeout_s)
        except KafkaError as exc:
            timed_out = isinstance(exc, KafkaTimeoutError)
            now = time.monotonic()
            if timed_out and self._transactional_id is not None:
                self._undelivered_since = self._undelivered_since or now
                if now - self._undelivered_since > TRANSACTIONAL_STALL_S:
                    # After a broker restart kafka-python's transactional sender can go on
                    # failing to find its coordinator long after the broker is back (seen for
                    # 300 s after a 12 s outage): the producer is given up, its transaction
                    # aborted, and the caller's step done again on a new one.
                    self._undelivered_since, self._stuck = None, True
                    raise StuckCallError(
                        f"transactional producer {self._transactional_id!r} delivered nothing "
                        f"to {self._settings.bootstrap_servers} for {TRANSACTIONAL_STALL_S:g}s"
                    ) from exc
            # a flush that timed out leaves the records queued: the call may be repeated
            error = BrokerUnavailableError if timed_out else TransportError
            raise error(
                f"records not acknowledged by {self._settings.bootstrap_servers} within "
                f"{timeout_s:g}s: {exc!r}"
            ) from exc
        self._undelivered_since = None
        self._raise_failures()

    def _transactional(self, step: str, action: Callable[[KafkaProducer], None]) -> None:
        if self._transactional_id is None:
            raise TransportError(f"{step} needs a producer opened with a transactional_id")
        if self._fenced is not None:  # no step of a fenced producer can succeed
            self._raise_failures()
        producer = self._producer
        try:
            if not self._initialised:
                producer.init_transactions()
                self._initialised = True
            action(producer)
        except (ProducerFencedError_, InvalidProducerEpochError) as exc:
            raise ProducerFencedError(
                fenced_message(
                    self._transactional_id,
                    self._settings.bootstrap_servers,
                    f"transaction {step}: {exc!r}",
                )
            ) from exc
        except KafkaError as exc:
            raise TransactionError(
                f"transaction {step} failed for transactional_id {self._transactional_id!r} on "
                f"{self._settings.bootstrap_servers}: {exc!r}",
                requires_abort=not getattr(exc, "fatal", False)
                and not isinstance(exc, KafkaTimeoutError),
                retriable=isinstance(exc, KafkaTimeoutError),
            ) from exc
        self._raise_failures()

    def begin_transaction(self) -> None:
        self._transactional("begin", lambda p: p.begin_transaction())

    def send_offsets_to_transaction(
        self, offsets: Sequence[TopicPartitionOffset], group_metadata: Any, timeout_s: float = 30.0
    ) -> None:
        mapping = {
            TopicPartition(o.topic, o.partition): OffsetAndMetadata(o.offset, o.metadata, -1)
            for o in offsets
        }
        # kafka-python waits for this call without a timeout, and retries a group that is
        # rebalancing forever: after an outage the group waits for this very process to rejoin,
        # which it cannot while blocked here. A producer stuck in it is given up (abort).
        try:
            bounded_call(
                f"transaction send_offsets for transactional_id {self._transactional_id!r} on "
                f"{self._settings.bootstrap_servers}",
                lambda: self._transactional(
                    "send_offsets", lambda p: p.send_offsets_to_transaction(mapping, group_metadata)
                ),
                timeout_s,
            )
        except StuckCallError:
            self._stuck = True
            raise

    def commit_transaction(self, timeout_s: float = 30.0) -> None:
        self._transactional("commit", lambda p: p.commit_transaction())

    def reclaim(self) -> None:
        client, self._client = self._client, None
        self._initialised, self._stuck, self._fenced, self._failures = False, False, None, []
        if client is not None:
            try:
                client.close(timeout=0)  # a fenced client flushes nothing
            except KafkaError as exc:
                log.warning("closing the fenced producer %r: %r", self._transactional_id, exc)

    def abort_transaction(self, timeout_s: float = 30.0) -> None:
        self._failures = []  # records of an aborted transaction are discarded on purpose
        if not self._stuck:
            self._transactional("abort", lambda p: p.abort_transaction())
            return
        # A producer stuck in a call takes no more calls. A new producer with the same
        # transactional_id fences it when it initialises, and the broker aborts the transaction
        # it left open: the abort this call promises.
        log.warning(
            "transactional producer %r is unusable (stuck in a call); replacing it: its open "
            "transaction is aborted when the new one initialises",
            self._transactional_id,
        )
        client, self._client = self._client, None
        self._initialised, self._stuck = False, False
        if client is not None:
            try:
                client.close(timeout=0)
            except KafkaError as exc:
                log.warning("closing the stuck producer %r: %r", self._transactional_id, exc)

    def close(self) -> None:
        if self._client is not None:
            try:
                if self._fenced is None and not self._stuck:  # an unusable client flushes nothing
                    self.flush()
            finally:
                client, self._client = self._client, None
                client.close(timeout=5)


class _SeekOnAssign(ConsumerRebalanceListener):
    def __init__(self, owner: KafkaPythonRecordConsumer) -> None:
        self._owner = owner

    def on_partitions_revoked(self, revoked: Any) -> None:
        self._owner._revoked |= {(tp.topic, tp.partition) for tp in revoked}

    def on_partitions_lost(self, lost: Any) -> None:
        self._owner._revoked |= {(tp.topic, tp.partition) for tp in lost}

    def on_partitions_assigned(self, assigned: Any) -> None:
        self._owner._apply_pending(list(assigned))


_SeekSpec = tuple[str, int]  # ("offset", n) | ("beginning", 0) | ("timestamp", ms)


class KafkaPythonRecordConsumer(RecordConsumer):
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
        self._config = _client_config(
            KafkaConsumer.DEFAULT_CONFIG,
            settings,
            {
                **CONSUMER_DEFAULTS,
                "group.id": group_id,
                "auto.offset.reset": "earliest" if from_beginning else "latest",
            },
            config,
        )
        self._window = kafka_outage_window(settings, unreachable_timeout_s)
        # the constructor blocks until bootstrapped: bound it like any other silence
        self._config.setdefault("bootstrap_timeout_ms", int(self._window.timeout_s * 1000))
        self._client: KafkaConsumer | None = None
        self._pending_seeks: dict[tuple[str, int], _SeekSpec] = {}
        self._pending_all: _SeekSpec | None = None
        self._revoked: set[tuple[str, int]] = set()

    @property
    def _consumer(self) -> KafkaConsumer:
        if self._client is None:
            try:
                client = KafkaConsumer(**self._config)
                client.subscribe(self._topics, listener=_SeekOnAssign(self))
            except KafkaError as exc:
                raise TransportError(
                    f"cannot subscribe to {self._topics} on {self._settings.bootstrap_servers}: "
                    f"{exc!r}"
                ) from exc
            self._client = client
        return self._client

    def _apply_pending(self, assigned: list[TopicPartition]) -> None:
        spec_all, self._pending_all = self._pending_all, None
        specs = {}
        for tp in assigned:
            spec = self._pending_seeks.pop((tp.topic, tp.partition), None) or spec_all
            if spec is not None:
                specs[tp] = spec
        self._seek_partitions(specs)

    def _seek_partitions(self, specs: Mapping[TopicPartition, _SeekSpec]) -> None:
        consumer = self._consumer
        try:
            by_time = {tp: v for tp, (kind, v) in specs.items() if kind == "timestamp"}
            found = consumer.offsets_for_times(by_time, timeout_ms=10_000) if by_time else {}
            for tp, (kind, value) in specs.items():
                if kind == "offset":
                    consumer.seek(tp, value)
                elif kind == "beginning":
                    consumer.seek_to_beginning(tp)
                elif found.get(tp) is not None:
                    consumer.seek(tp, found[tp].offset)
                else:
                    consumer.seek_to_end(tp)
        except KafkaError as exc:
            where = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in specs)
            raise TransportError(f"seek of {where} failed: {exc!r}") from exc

    def _reachable(self) -> bool:
        client = self._consumer._client  # noqa: SLF001 (connection state has no public API)
        if client.bootstrap_connected():
            return True
        return any(client.connected(b.node_id) for b in client.cluster.brokers())

    def _check_reachable(self) -> None:
        if self._reachable():
            self._window.succeeded()
            return
        self._window.failed("no broker connection")  # OutageError once past the window

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        consumer = self._consumer
        try:
            batches = consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except FencedInstanceIdError as exc:
            raise ConsumerFencedError(
                f"fenced: another process joined consumer group {self._group_id!r} "
                f"with this one's group.instance.id and took over; this one commits nothing "
                f"more ({exc!r})"
            ) from exc
        except KafkaError as exc:
            raise TransportError(
                f"poll of {self._topics} on {self._settings.bootstrap_servers} failed: {exc!r}"
            ) from exc
        if not batches:
            self._check_reachable()
            return []
        self._window.succeeded()
        return [
            Record(
                topic=r.topic,
                partition=r.partition,
                offset=r.offset,
                key=r.key,
                value=r.value,
                headers=list(r.headers or []),
                timestamp_ms=r.timestamp,
            )
            for records in batches.values()
            for r in records
        ]

    def commit(self, offsets: Sequence[TopicPartitionOffset]) -> None:
        if not offsets:
            return
        mapping = {
            TopicPartition(o.topic, o.partition): OffsetAndMetadata(o.offset, o.metadata, -1)
            for o in offsets
        }
        try:
            self._consumer.commit(offsets=mapping)
        except KafkaError as exc:
            where = ", ".join(f"{o.topic}[{o.partition}]@{o.offset}" for o in offsets)
            raise TransportError(f"commit of {where} failed: {exc!r}") from exc

    def committed(self, timeout_s: float = 10.0) -> list[TopicPartitionOffset]:
        consumer = self._consumer
        out = []
        try:
            for topic in self._topics:
                for p in sorted(consumer.partitions_for_topic(topic) or ()):
                    found = consumer.committed(
                        TopicPartition(topic, p), metadata=True, timeout_ms=int(timeout_s * 1000)
                    )
                    if found is not None and found.offset >= 0:
                        text = commit_metadata_text(found.metadata)
                        out.append(TopicPartitionOffset(topic, p, found.offset, text))
        except KafkaError as exc:
            raise TransportError(
                f"reading committed offsets of {self._topics} failed: {exc!r}"
            ) from exc
        return out

    def group_metadata(self) -> Any:
        return self._consumer.group_metadata()

    def assignment(self) -> list[tuple[str, int]]:
        return sorted((tp.topic, tp.partition) for tp in self._consumer.assignment())

    def seek(self, topic: str, partition: int, offset: int) -> None:
        if (topic, partition) in self.assignment():
            self._seek_partitions({TopicPartition(topic, partition): ("offset", offset)})
        else:
            self._pending_seeks[(topic, partition)] = ("offset", offset)

    def _seek_all(self, spec: _SeekSpec) -> None:
        assigned = self._consumer.assignment()
        if assigned:
            self._seek_partitions({tp: spec for tp in assigned})
        else:
            self._pending_all = spec

    def seek_to_beginning(self, partitions: Sequence[tuple[str, int]] | None = None) -> None:
        if partitions is None:
            self._seek_all(("beginning", 0))
            return
        held = set(self.assignment())
        for topic, partition in partitions:
            if (topic, partition) in held:
                self._seek_partitions({TopicPartition(topic, partition): ("beginning", 0)})
            else:
                self._pending_seeks[(topic, partition)] = ("beginning", 0)

    def seek_to_timestamp(self, timestamp_ms: int) -> None:
        self._seek_all(("timestamp", timestamp_ms))

    def take_revoked(self) -> set[tuple[str, int]]:
        revoked, self._revoked = self._revoked, set()
        return revoked

    def rejoin(self) -> None:
        if self._client is not None:
            self._revoked |= set(self.assignment())
        self.close()
        self._pending_seeks.clear()
        self._pending_all = None

    def positions(self) -> dict[tuple[str, int], int]:
        consumer = self._consumer
        out = {}
        try:
            for tp in consumer.assignment():
                offset = consumer.position(tp, timeout_ms=10_000)
                if offset is not None and offset >= 0:
                    out[(tp.topic, tp.partition)] = offset
        except KafkaError as exc:
            raise TransportError(f"cannot read positions in {self._topics}: {exc!r}") from exc
        return out

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            try:
                client.close(autocommit=False, timeout_ms=5000)
            except KafkaError as exc:
                log.warning("closing Kafka consumer of %s: %r", self._topics, exc)


class KafkaPythonBackend(KafkaBackend):
    """kafka-python clients for one cluster."""

    def admin(self) -> TopicAdmin:
        return KafkaPythonTopicAdmin(self.settings)

    def producer(
        self, transactional_id: str | None = None, config: Mapping[str, Any] | None = None
    ) -> RecordProducer:
        return KafkaPythonRecordProducer(self.settings, transactional_id, config)

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
            # kafka-python holds what one fetch returned: bound that fetch
            config = {
                "fetch.max.bytes": max(prefetch_bytes, 1 << 20),
                "max.partition.fetch.bytes": max(prefetch_bytes // 4, 1 << 20),
                **(config or {}),
            }
        return KafkaPythonRecordConsumer(
            self.settings, group_id, topics, from_beginning, config, unreachable_timeout_s
        )


@KAFKA_BACKENDS.register("kafka-python")
def kafka_python_backend(settings: KafkaSettings) -> KafkaBackend:
    return KafkaPythonBackend(settings)
