"""The event plane's client-neutral interfaces and the registry of Kafka client backends.

A backend (confluent-kafka, kafka-python, or a user's own) implements `TopicAdmin`,
`RecordProducer` and `RecordConsumer` over raw bytes; the typed layer (`EventWriter`,
`EventReader`) is written once against these. `kafka_backend(settings)` picks the backend named by
`KafkaSettings.client` through `KAFKA_BACKENDS`; built-in backends are imported on first use, and
share their policy through `rft.events.kafka_core`.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Self

from rft.config.connections import KafkaSettings
from rft.errors import BrokerUnavailableError, FencedError, TransportError
from rft.events.record_size import refuse_oversized
from rft.registry import Registry
from rft.stack.outage_window import kafka_outage_window as kafka_outage_window  # re-exported

Headers = list[tuple[str, bytes]]

# Seconds a consumer may go without reaching any broker before poll() raises: None means the
# cluster's `stack.kafka.outage_timeout`.
DEFAULT_UNREACHABLE_TIMEOUT_S: float | None = None


class TransactionError(TransportError):
    """A transaction step failed; `requires_abort` says the caller must abort() before retrying,
    `retriable` that the same step may simply be called again (it timed out, nothing was lost)."""

    def __init__(self, message: str, *, requires_abort: bool, retriable: bool = False) -> None:
        super().__init__(message)
        self.requires_abort = requires_abort
        self.retriable = retriable and not requires_abort


# Seconds past its own timeout that a client call may block before the client is given up.
STUCK_GRACE_S = 20.0


class StuckCallError(TransactionError):
    """A client call still blocked well past its timeout: the client is given up (the caller
    replaces it; a new transactional producer fences the old one and aborts what it left open)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, requires_abort=True)


def bounded_call(what: str, action: Callable[[], None], timeout_s: float) -> None:
    """`action()` on a thread of its own, waited for `timeout_s` + STUCK_GRACE_S.

    Some client calls can block past their own timeout, or without one: a transactional offset
    commit that waits for its consumer group while the group waits for this very process to
    rejoin (it cannot poll while blocked here), seen after an outage with both clients. Such a
    call raises StuckCallError instead of hanging the process; its thread is left behind."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            action()
            outcome.append(None)
        except BaseException as exc:  # handed to the caller's thread below
            outcome.append(exc)

    worker = threading.Thread(target=run, name=f"rft-{what}", daemon=True)
    worker.start()
    worker.join(timeout_s + STUCK_GRACE_S)
    if not outcome:
        raise StuckCallError(
            f"{what} still blocked {timeout_s + STUCK_GRACE_S:g}s after its timeout; the client "
            "is given up and its transaction aborted"
        )
    if outcome[0] is not None:
        raise outcome[0]


def retriable_in_outage(exc: Exception) -> bool:
    """Whether a failed Kafka call lost nothing and may be made again as it was."""
    if isinstance(exc, TransactionError):
        return exc.retriable
    return isinstance(exc, BrokerUnavailableError)


class ProducerFencedError(TransactionError, FencedError):
    """A newer producer initialised this producer's transactional id (its epoch bump fenced this
    one): nothing this producer sends can commit any more, and the process must stop."""

    def __init__(self, message: str) -> None:
        super().__init__(message, requires_abort=False)


class ConsumerFencedError(TransportError, FencedError):
    """A newer consumer joined this consumer's group with its group.instance.id (static
    membership, from the explorer id): the process must stop."""


def fenced_message(transactional_id: str | None, bootstrap: str, detail: str) -> str:
    """The one line a fenced producer's process ends with, for every backend."""
    return (
        f"fenced: another process started with transactional id {transactional_id!r} on "
        f"{bootstrap} and took over; this one publishes nothing more ({detail})"
    )


@dataclass(frozen=True)
class Record:
    """One Kafka record as bytes, with where it came from."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int


@dataclass(frozen=True)
class TopicPartitionOffset:
    """A position in a partition; for commits, `offset` is the next record to read.

    `metadata` is the free string Kafka stores beside a committed offset (consumers keep their
    own progress there, e.g. the explorer's step); empty when unused.
    """

    topic: str
    partition: int
    offset: int
    metadata: str = ""


def commit_metadata_text(raw: str | None) -> str:
    """Commit metadata as read back from a broker: librdkafka stores the string NUL-terminated
    and some clients show that NUL; a missing value is empty."""
    return (raw or "").rstrip("\x00")


@dataclass(frozen=True)
class TopicSpec:
    """What a topic should look like when created."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]


@dataclass(frozen=True)
class TopicInfo:
    """A topic as the broker describes it."""

    name: str
    partitions: list[PartitionInfo]
    configs: dict[str, str]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True)
class PartitionBounds:
    """The offsets a partition holds now: `low` is its oldest kept record, `high` (the high
    watermark) the offset the next record will get; `high - low` counts records and transaction
    markers."""

    topic: str
    partition: int
    low: int
    high: int


@dataclass(frozen=True)
class GroupMember:
    """One member of a consumer group and the partitions it holds."""

    member_id: str
    client_id: str
    host: str
    assignment: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class GroupDescription:
    """A consumer group as its coordinator describes it.

    `state` is the broker's group state in lower case with underscores: `stable`, `empty`,
    `preparing_rebalance`, `completing_rebalance`, `dead` or `unknown`.
    """

    group_id: str
    state: str
    members: tuple[GroupMember, ...] = ()


def group_state_name(raw: object) -> str:
    """A broker's group state (`Stable`, `PreparingRebalance`, `ConsumerGroupState.STABLE`) in
    the one spelling `GroupDescription.state` uses."""
    text = str(getattr(raw, "name", raw) or "unknown")
    if "_" not in text and not text.isupper():
        text = "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(text))
    return text.lower()


class _Closing(ABC):
    """Context-manager plumbing shared by every client wrapper."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class TopicAdmin(_Closing):
    """Creates, lists and describes topics."""

    @abstractmethod
    def create_topics(self, specs: Sequence[TopicSpec], timeout_s: float = 30.0) -> list[str]:
        """Create the topics that do not exist yet; return the names actually created."""

    @abstractmethod
    def list_topics(self, timeout_s: float = 10.0) -> list[str]:
        """Names of all topics, internal ones (`__...`) left out, sorted."""

    @abstractmethod
    def describe_topics(self, names: Sequence[str], timeout_s: float = 10.0) -> list[TopicInfo]:
        """Partitions, replicas and non-default configs of each named topic."""

    @abstractmethod
    def delete_topics(self, names: Sequence[str], timeout_s: float = 30.0) -> None: ...

    @abstractmethod
    def partition_bounds(
        self, topics: Sequence[str], timeout_s: float = 10.0, committed: bool = False
    ) -> list[PartitionBounds]:
        """Low and high offsets of every partition of `topics`, in topic and partition order.

        With `committed`, `high` is the last stable offset: the end of what a read_committed
        reader can reach now, before any transaction still open.
        """

    @abstractmethod
    def offsets_for_timestamp(
        self, topics: Sequence[str], timestamp_ms: int, timeout_s: float = 10.0
    ) -> dict[tuple[str, int], int]:
        """Per partition of `topics`, the offset of its first record stamped at or after
        `timestamp_ms` (ms since the epoch); the high watermark where there is none."""

    @abstractmethod
    def list_groups(self, timeout_s: float = 10.0) -> list[str]:
        """Ids of the cluster's consumer groups, sorted."""

    @abstractmethod
    def describe_groups(
        self, group_ids: Sequence[str], timeout_s: float = 10.0
    ) -> list[GroupDescription]:
        """State and members of each group, in the order asked; an unknown group reads as
        state `dead` with no members."""

    @abstractmethod
    def group_offsets(self, group_id: str, timeout_s: float = 10.0) -> list[TopicPartitionOffset]:
        """The group's committed offsets (next to read) with their metadata, sorted; partitions
        never committed are left out."""


class RecordProducer(_Closing):
    """An idempotent, acks=all producer of raw records; optionally transactional.

    `produce` refuses a record over `max_record_bytes` with RecordTooLargeError before queueing
    it; `check_size` runs the same check without producing.
    """

    @property
    @abstractmethod
    def max_record_bytes(self) -> int:
        """The largest record (value, key, headers and framing) this producer sends."""

    @property
    @abstractmethod
    def record_limit_setting(self) -> str:
        """The client setting that sets `max_record_bytes`, for error messages."""

    def check_size(
        self, topic: str, value: bytes, key: bytes | None = None, headers: Headers | None = None
    ) -> None:
        """RecordTooLargeError if the record would be over `max_record_bytes`."""
        refuse_oversized(
            topic, value, key, headers, self.max_record_bytes, self.record_limit_setting
        )

    @abstractmethod
    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None:
        """Queue one record; delivery failures surface as TransportError from flush()."""

    @abstractmethod
    def flush(self, timeout_s: float = 30.0) -> None:
        """Block until every queued record is acknowledged; raise TransportError naming the first
        failed topic/partition, or when records are still in flight after `timeout_s`."""

    @abstractmethod
    def begin_transaction(self) -> None: ...

    @abstractmethod
    def send_offsets_to_transaction(
        self, offsets: Sequence[TopicPartitionOffset], group_metadata: Any, timeout_s: float = 30.0
    ) -> None: ...

    @abstractmethod
    def commit_transaction(self, timeout_s: float = 30.0) -> None: ...

    @abstractmethod
    def reclaim(self) -> None:
        """Drop a client that was fenced although no other process claimed its transactional id
        (the broker bumped its epoch: rft.events.claims): the next transactional call makes a
        new client, whose initialisation fences the old epoch."""

    @abstractmethod
    def abort_transaction(self, timeout_s: float = 30.0) -> None: ...


class RecordConsumer(_Closing):
    """A consumer-group member with manual commits, read_committed isolation and seeking.

    Seeks apply to partitions assigned now, and to each other partition once, when it is first
    assigned (subscriptions assign partitions lazily, during poll).
    """

    # Seconds a poll made only to keep the member's group going (its rebalances) should wait:
    # 0 where the client runs the rebalance protocol on threads of its own and a poll just hands
    # over its results; more where the join and sync round trips happen inside poll.
    group_poll_s: ClassVar[float] = 0.0

    @abstractmethod
    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to `max_records` records, waiting at most `timeout_s` for the first one; raise
        OutageError when no broker has been reachable for the unreachable timeout."""

    @abstractmethod
    def commit(self, offsets: Sequence[TopicPartitionOffset]) -> None:
        """Synchronously commit the given next-to-read offsets for this group; a failure that
        lost nothing (no coordinator, a timeout) raises BrokerUnavailableError."""

    @abstractmethod
    def committed(self, timeout_s: float = 10.0) -> list[TopicPartitionOffset]:
        """This group's committed offsets, with their metadata, on every partition of the
        subscribed topics (assigned to this member or not); partitions never committed are left
        out. Works before the first poll."""

    @abstractmethod
    def group_metadata(self) -> Any:
        """The opaque consumer-group metadata a transactional producer needs."""

    @abstractmethod
    def assignment(self) -> list[tuple[str, int]]: ...

    @abstractmethod
    def seek(self, topic: str, partition: int, offset: int) -> None: ...

    @abstractmethod
    def rejoin(self) -> None:
        """Drop the client after the broker fenced its group membership although no other
        process holds this member's id (a static member can fence itself when the coordinator
        restarts mid-join). The next call makes a new client, which joins the group afresh and
        reads each partition it gets from the group's committed offset; every partition held
        now counts as revoked (take_revoked)."""

    @abstractmethod
    def seek_to_beginning(self, partitions: Sequence[tuple[str, int]] | None = None) -> None:
        """Move `partitions` (default: every assigned one, or the first assignment) to their
        oldest kept record."""

    @abstractmethod
    def seek_to_timestamp(self, timestamp_ms: int) -> None:
        """Move each partition to its first record at or after `timestamp_ms` (or its end)."""

    @abstractmethod
    def positions(self) -> dict[tuple[str, int], int]:
        """The offset each assigned partition reads next (past transaction markers and aborted
        records already skipped); partitions whose position is not known yet are left out."""

    @abstractmethod
    def pause(self, partitions: Sequence[tuple[str, int]]) -> None:
        """Stop fetching `partitions` until resume(): a caller that buffers records of its own
        bounds its memory by pausing the partitions it holds most of. Records of them fetched
        already may still come, or be dropped and fetched again after resume(), from the
        position. The pause holds across rebalances (and rejoin): a paused partition assigned
        again, or assigned later, is paused as it is assigned."""

    @abstractmethod
    def resume(self, partitions: Sequence[tuple[str, int]]) -> None:
        """Fetch paused `partitions` again."""

    @abstractmethod
    def take_revoked(self) -> set[tuple[str, int]]:
        """The partitions revoked from this member (or lost by it) since the last call, and
        forget them. A rebalance runs inside poll(), so a caller that keeps records between
        polls asks after each one and drops what it no longer owns: committing offsets of a lost
        partition would overwrite its new owner's."""


class KafkaBackend(ABC):
    """Makes the three client wrappers for one Kafka client library and one cluster."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings

    @abstractmethod
    def admin(self) -> TopicAdmin: ...

    @abstractmethod
    def producer(
        self, transactional_id: str | None = None, config: Mapping[str, Any] | None = None
    ) -> RecordProducer:
        """`config` takes Java-style keys (`linger.ms`) over the defaults and settings.extra."""

    @abstractmethod
    def consumer(
        self,
        group_id: str,
        topics: Sequence[str],
        from_beginning: bool = True,
        config: Mapping[str, Any] | None = None,
        unreachable_timeout_s: float | None = DEFAULT_UNREACHABLE_TIMEOUT_S,
        prefetch_bytes: int | None = None,
    ) -> RecordConsumer:
        """`unreachable_timeout_s` bounds how long poll() rides out an outage (default: the
        settings' outage_timeout) before it raises OutageError.
        `prefetch_bytes` bounds the records fetched ahead of poll() (default: the client's
        throughput-minded buffers, hundreds of MiB); a bulk reader sets it to keep memory low."""


BackendFactory = Callable[[KafkaSettings], KafkaBackend]

KAFKA_BACKENDS: Registry[BackendFactory] = Registry("stack.kafka.client")

# Built-in backends live in modules that import their client library; they load on first use so
# that choosing one never requires the other to be installed.
KAFKA_BACKENDS.lazy("confluent", "rft.events.kafka_confluent:confluent_backend")
KAFKA_BACKENDS.lazy("kafka-python", "rft.events.kafka_python:kafka_python_backend")


def kafka_backend(settings: KafkaSettings) -> KafkaBackend:
    """The backend named by `settings.client`, bound to `settings`."""
    return KAFKA_BACKENDS.get(settings.client)(settings)


def backend_names() -> list[str]:
    return KAFKA_BACKENDS.names()


def known_backend(name: str) -> str:
    """`name` when it selects a backend (built-in or registered), without importing its client;
    otherwise ConfigError naming the known ones and the closest match."""
    KAFKA_BACKENDS.entry(name)
    return name
