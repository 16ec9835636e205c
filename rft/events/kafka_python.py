"""The kafka-python backend of the event plane: the only module importing `kafka`.

Owns kafka-python's client calls, its settings and defaults, and how its errors read:
KafkaAdminClient, KafkaProducer and KafkaConsumer under the policy that `rft.events.kafka_core`
writes once for every backend. Config keys arrive Java-style (`linger.ms`) and are mapped to
kafka-python's names (`linger_ms`); a key no kafka-python client knows is a ConfigError naming it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, OffsetSpec
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.errors import (
    FencedInstanceIdError,
    IllegalStateError,
    InvalidProducerEpochError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
    TransactionAbortedError,
    UnknownTopicOrPartitionError,
)
from kafka.errors import ProducerFencedError as ProducerFencedError_
from kafka.structs import OffsetAndMetadata, TopicPartition

from rft.config.connections import KafkaSettings
from rft.errors import ConfigError, TransportError
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
    GroupDescription,
    GroupMember,
    Headers,
    KafkaBackend,
    PartitionInfo,
    Record,
    TopicInfo,
    TopicPartitionOffset,
    TopicSpec,
    commit_metadata_text,
    group_state_name,
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


class _KafkaPythonErrors(ClientErrors):
    types = (KafkaError,)

    def unavailable(self, exc: BaseException) -> bool:
        return isinstance(exc, KafkaTimeoutError)

    def disconnected(self, exc: BaseException) -> bool:
        # a poll whose metadata refresh finds the broker gone raises the connection error
        # (seen: ECONNREFUSED during a broker restart) instead of returning nothing
        return isinstance(exc, (KafkaTimeoutError, KafkaConnectionError))

    def producer_fenced(self, exc: BaseException) -> bool:
        return isinstance(exc, (ProducerFencedError_, InvalidProducerEpochError))

    def consumer_fenced(self, exc: BaseException) -> bool:
        return isinstance(exc, FencedInstanceIdError)

    def requires_abort(self, exc: BaseException) -> bool:
        return not isinstance(exc, KafkaTimeoutError)

    def retriable(self, exc: BaseException) -> bool:
        return isinstance(exc, KafkaTimeoutError)


ERRORS = _KafkaPythonErrors()

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


class KafkaPythonTopicAdmin(CoreTopicAdmin):
    errors = ERRORS

    def __init__(self, settings: KafkaSettings) -> None:
        super().__init__(settings)
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

    def _create_now(self, specs: Sequence[TopicSpec], timeout_s: float) -> list[str]:
        created: list[str] = []
        for spec in specs:
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
        return created

    def _leaderless(self, names: Sequence[str], timeout_s: float) -> list[str]:
        try:
            described = {t["name"]: t for t in self._admin(timeout_s).describe_topics(list(names))}
        except KafkaError:
            return list(names)  # metadata not answered yet: none is known to be ready
        return [
            n
            for n in names
            if n not in described
            or described[n].get("error_code")
            or not described[n]["partitions"]
            or any(p.get("error_code") or p["leader_id"] < 0 for p in described[n]["partitions"])
        ]

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
        self._refuse_missing(
            [n for n in names if n not in described or described[n].get("error_code")]
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

    def _partitions(self, topics: Sequence[str], timeout_s: float) -> list[Partition]:
        with self._calling(f"cannot describe topics {list(topics)}"):
            described = {t["name"]: t for t in self._admin(timeout_s).describe_topics(list(topics))}
        self._refuse_missing(
            [t for t in topics if t not in described or described[t].get("error_code")]
        )
        return [
            (t, p)
            for t in topics
            for p in sorted(q["partition_index"] for q in described[t]["partitions"])
        ]

    def _list_offsets(
        self, queries: Mapping[Partition, OffsetQuery], timeout_s: float, committed: bool = False
    ) -> dict[Partition, int]:
        if not queries:
            return {}
        specs = {TopicPartition(t, p): _offset_spec(q) for (t, p), q in queries.items()}
        level = "read_committed" if committed else "read_uncommitted"
        where = ", ".join(f"{t}[{p}]" for t, p in queries)
        with self._calling(f"cannot list offsets of {where}"):
            found = self._admin(timeout_s).list_partition_offsets(
                specs, isolation_level=level, timeout_ms=int(timeout_s * 1000)
            )
        return {(tp.topic, tp.partition): found[tp].offset for tp in specs}

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


def _offset_spec(query: OffsetQuery) -> Any:
    if query == "earliest":
        return OffsetSpec.EARLIEST
    if query == "latest":
        return OffsetSpec.LATEST
    return int(query)


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


class KafkaPythonRecordProducer(CoreRecordProducer[KafkaProducer]):
    errors = ERRORS
    # kafka-python's transactional sender can fail to find its coordinator for minutes after a
    # broker restart (see CoreRecordProducer._give_up_if_stalled)
    transactional_stall_s = TRANSACTIONAL_STALL_S

    def __init__(
        self,
        settings: KafkaSettings,
        transactional_id: str | None,
        config: Mapping[str, Any] | None,
    ) -> None:
        super().__init__(settings, transactional_id)
        self._config = _client_config(
            KafkaProducer.DEFAULT_CONFIG, settings, PRODUCER_DEFAULTS, config
        )
        if transactional_id is not None:
            self._config["transactional_id"] = transactional_id
        if "delivery.timeout.ms" not in {**settings.extra, **(config or {})}:
            self._config["delivery_timeout_ms"] = undelivered_expiry_ms(settings)
        self._fenced: str | None = None  # a delivery refused because a newer producer took over
        # a commit or abort begun and not yet acknowledged: (client, commit?, its result)
        self._ending: tuple[KafkaProducer, bool, Any] | None = None

    def _open(self) -> KafkaProducer:
        return KafkaProducer(**self._config)

    def _fence_detail(self) -> str | None:
        return self._fenced

    def _forget_fatal(self) -> None:
        self._fenced = None

    @property
    def max_record_bytes(self) -> int:
        default = KafkaProducer.DEFAULT_CONFIG["max_request_size"]
        return int(self._config.get("max_request_size", default))

    @property
    def record_limit_setting(self) -> str:
        return "max.request.size"

    def _send_now(
        self,
        client: KafkaProducer,
        topic: str,
        value: bytes,
        key: bytes | None,
        headers: Headers | None,
        partition: int | None,
    ) -> None:
        future = client.send(
            topic, value=value, key=key, headers=headers or None, partition=partition
        )

        def failed(exc: BaseException) -> None:
            if isinstance(exc, TransactionAbortedError):
                return  # records of an aborted transaction are discarded on purpose
            if isinstance(exc, (ProducerFencedError_, InvalidProducerEpochError)):
                self._fenced = f"delivery to {topic}: {exc!r}"
            self._delivery_failed(topic, partition, repr(exc))

        future.add_errback(self._while_current(failed))

    def _flush_now(self, client: KafkaProducer, timeout_s: float) -> str | None:
        try:
            client.flush(timeout=timeout_s)
        except KafkaTimeoutError:
            return "records"  # still queued: the call may be repeated
        return None

    def _init_now(self, client: KafkaProducer) -> None:
        client.init_transactions()

    def _begin_now(self, client: KafkaProducer) -> None:
        client.begin_transaction()

    def _send_offsets_now(
        self,
        client: KafkaProducer,
        offsets: Sequence[TopicPartitionOffset],
        group_metadata: Any,
        timeout_s: float,
    ) -> None:
        mapping = {
            TopicPartition(o.topic, o.partition): OffsetAndMetadata(o.offset, o.metadata, -1)
            for o in offsets
        }
        client.send_offsets_to_transaction(mapping, group_metadata)

    def _commit_now(self, client: KafkaProducer, timeout_s: float) -> None:
        self._end_transaction(client, True, timeout_s)

    def _abort_now(self, client: KafkaProducer, timeout_s: float) -> None:
        self._end_transaction(client, False, timeout_s)

    def _end_transaction(self, client: KafkaProducer, commit: bool, timeout_s: float) -> None:
        """What `commit_transaction()` / `abort_transaction()` do, waiting at most `timeout_s`.

        Those two take no timeout. With Kafka stopped, a commit waited for the client's request
        timeout (30 s), whatever the writer's outage window, and then failed with an error that
        is not an outage, so the writer did not ride it out (tests/faults/test_broker_kill.py).
        Once begun, the end of a transaction cannot be begun again (the client refuses a second
        commit while one is pending), so a call that timed out leaves it pending, and the next
        call of the same kind on the same client waits for that one: as with librdkafka, a
        commit that timed out may be called again. A Kafka away longer than the request timeout
        still fails the pending commit with the client's error."""
        pending = self._ending
        if pending is None or pending[0] is not client or pending[1] != commit:
            manager = client._transaction_manager
            if manager is None:
                raise IllegalStateError("transactions are not enabled on this producer")
            result = manager.begin_commit() if commit else manager.begin_abort()
            client._sender.wakeup()
            pending = self._ending = (client, commit, result)
        result = pending[2]
        try:
            done = result.wait(timeout_ms=timeout_s * 1000)
        finally:
            if result.is_done:
                self._ending = None
        if not done:
            raise KafkaTimeoutError(
                f"the transaction's {'commit' if commit else 'abort'} was not acknowledged in "
                f"{timeout_s:g}s; it stays pending, and the next call waits for it"
            )

    def _discard(self, client: KafkaProducer, stuck: bool) -> None:
        try:
            client.close(timeout=0)  # a fenced or stuck client flushes nothing
        except KafkaError as exc:
            log.warning("closing the given-up producer %r: %r", self._transactional_id, exc)

    def _close_client(self, client: KafkaProducer) -> None:
        client.close(timeout=5)


class _SeekOnAssign(ConsumerRebalanceListener):
    def __init__(self, owner: KafkaPythonRecordConsumer) -> None:
        self._owner = owner

    def on_partitions_revoked(self, revoked: Any) -> None:
        self._owner._revoked_now((tp.topic, tp.partition) for tp in revoked)

    def on_partitions_lost(self, lost: Any) -> None:
        self._owner._revoked_now((tp.topic, tp.partition) for tp in lost)

    def on_partitions_assigned(self, assigned: Any) -> None:
        specs = self._owner._assigned_now((tp.topic, tp.partition) for tp in assigned)
        if specs:
            self._owner._seek_assigned(specs)
        self._owner._pause_assigned((tp.topic, tp.partition) for tp in assigned)


class KafkaPythonRecordConsumer(CoreRecordConsumer[KafkaConsumer]):
    errors = ERRORS
    # kafka-python joins and syncs inside poll: a poll of 0 s sends a request and returns, and a
    # member that polls that way between steps could take a step per round trip to rebalance
    group_poll_s = 0.1

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
        self._config = _client_config(
            KafkaConsumer.DEFAULT_CONFIG,
            settings,
            {**CONSUMER_DEFAULTS, **group_config(group_id, from_beginning)},
            config,
        )
        # the constructor blocks until bootstrapped: bound it like any other silence
        self._config.setdefault("bootstrap_timeout_ms", int(self._window.timeout_s * 1000))

    def _open(self) -> KafkaConsumer:
        client = KafkaConsumer(**self._config)
        client.subscribe(self._topics, listener=_SeekOnAssign(self))
        return client

    def _seek_now(self, client: KafkaConsumer, specs: Mapping[tuple[str, int], SeekSpec]) -> None:
        tps = {TopicPartition(t, p): spec for (t, p), spec in specs.items()}
        by_time = {tp: v for tp, (kind, v) in tps.items() if kind == "timestamp"}
        found = client.offsets_for_times(by_time, timeout_ms=10_000) if by_time else {}
        for tp, (kind, value) in tps.items():
            if kind == "offset":
                client.seek(tp, value)
            elif kind == "beginning":
                client.seek_to_beginning(tp)
            elif found.get(tp) is not None:
                client.seek(tp, found[tp].offset)
            else:
                client.seek_to_end(tp)

    def _outage_suspected(self) -> bool:
        return True  # the probe reads the client's own connection state: cheap on every poll

    def _unreachable(self, client: KafkaConsumer) -> str | None:
        state = client._client  # noqa: SLF001 (connection state has no public API)
        if state.bootstrap_connected():
            return None
        if any(state.connected(b.node_id) for b in state.cluster.brokers()):
            return None
        return "no broker connection"

    def _fetch_now(self, client: KafkaConsumer, max_records: int, timeout_s: float) -> Any:
        return client.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)

    def _records(self, fetched: Any) -> list[Record]:
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
            for records in fetched.values()
            for r in records
        ]

    def _commit_now(self, client: KafkaConsumer, offsets: Sequence[TopicPartitionOffset]) -> None:
        client.commit(
            offsets={
                TopicPartition(o.topic, o.partition): OffsetAndMetadata(o.offset, o.metadata, -1)
                for o in offsets
            }
        )

    def _committed_now(self, client: KafkaConsumer, timeout_s: float) -> list[TopicPartitionOffset]:
        # Read through an admin client, whose calls are bounded: the consumer's own way (its
        # partitions_for_topic, then committed per partition) waits without a timeout for
        # metadata when the broker is away.
        admin = KafkaPythonTopicAdmin(self._settings)
        try:
            found = admin.group_offsets(self._group_id, timeout_s)
        finally:
            admin.close()
        return [o for o in found if o.topic in self._topics]

    def _group_metadata_now(self, client: KafkaConsumer) -> Any:
        return client.group_metadata()

    def _assignment_now(self, client: KafkaConsumer) -> list[tuple[str, int]]:
        return [(tp.topic, tp.partition) for tp in client.assignment()]

    def _positions_now(self, client: KafkaConsumer) -> dict[tuple[str, int], int]:
        out = {}
        for tp in client.assignment():
            offset = client.position(tp, timeout_ms=10_000)
            if offset is not None and offset >= 0:
                out[(tp.topic, tp.partition)] = offset
        return out

    def _pause_now(
        self, client: KafkaConsumer, partitions: Sequence[tuple[str, int]], paused: bool
    ) -> None:
        tps = [TopicPartition(t, p) for t, p in partitions]
        if paused:
            client.pause(*tps)
        else:
            client.resume(*tps)

    def _close_client(self, client: KafkaConsumer) -> None:
        client.close(autocommit=False, timeout_ms=5000)


class KafkaPythonBackend(CoreBackend):
    """kafka-python clients for one cluster (prefetch: it holds what one fetch returned)."""

    admin_type = KafkaPythonTopicAdmin
    producer_type = KafkaPythonRecordProducer
    consumer_type = KafkaPythonRecordConsumer


@KAFKA_BACKENDS.register("kafka-python")
def kafka_python_backend(settings: KafkaSettings) -> KafkaBackend:
    return KafkaPythonBackend(settings)
