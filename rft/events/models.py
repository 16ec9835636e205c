"""The events that move between rft components, as plain validated dataclasses.

Each event names the Avro record it maps to (`SCHEMA`) and declares its fields once, as dataclass
fields named and typed like those of the record's newest `.avsc`. Everything else comes from
there (rft.events.transcoder): construction checks types, ranges and token-array lengths, so an
invalid event cannot exist; `to_record` / `from_record` map to and from the Avro record; fields a
record written with an older schema lacks take the schema's defaults. Models are pure: no Kafka,
no I/O beyond reading the schema files once.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from rft.events.field_checks import (
    FLOAT_DTYPE,
    ID_DTYPE,
    MASK_DTYPE,
    InvalidEventError,
    fail,
)
from rft.events.transcoder import FINITE_POSITIVE, SchemaRecord, at_least, one_of


def now_ms() -> int:
    """Current wall-clock time in milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Task(SchemaRecord):
    """One unit of exploration: a raw taskset row plus how to roll it out and score it.

    `payload` and `rollout_args` travel as JSON object text. `position` is the task's place in
    the sequence its publisher wrote (from 0); None for events written before schema v2, which
    `published_order` places by (epoch, index).
    """

    SCHEMA: ClassVar[str] = "rft.events.Task"

    task_id: str
    taskset: str
    epoch: int
    index: int
    payload: dict[str, Any]
    format: dict[str, str] = field(default_factory=dict)
    workflow: str = ""
    reward_fn: str = ""
    rollout_args: dict[str, Any] = field(default_factory=dict)
    repeat_times: int = field(default=1, metadata=at_least(1))
    is_eval: bool = False
    created_at: int = field(default_factory=now_ms)
    position: int | None = field(default=None, metadata=at_least(0))

    @property
    def published_order(self) -> tuple[int, int]:
        """Where this task comes in its publisher's sequence, as a sort key: (epoch, position).
        A task written before schema v2 has no position: (epoch, index), file order within its
        epoch (the selector's order of such a publish is not recorded anywhere)."""
        return (self.epoch, self.index if self.position is None else self.position)


@dataclass(frozen=True, slots=True, eq=False)
class Experience(SchemaRecord):
    """One scored rollout of a task, tagged with the model version that generated it.

    Token arrays are numpy: prompt_ids / response_ids int32, logprobs float32 and action_mask bool
    (one per response token), token_rewards float32 (one per response token) or None. Lists are
    accepted and converted. Equality compares arrays bit for bit.

    logprob_temperature: the T of `logprobs` = log_softmax(logits / T) (finite, > 0); the trainer
    recomputes at the same T. explorer_group: the consumer group of the explorer that made it.
    Events written before schema v3 read as T = 1.0 and explorer_group "".

    Step-wise experiences (schema v4): `turn` of `turn_count` steps of the trajectory
    `trajectory_id`; `group_size` counts trajectories. An experience that is a whole trajectory
    (every event before v4) has trajectory_id "", turn 0, turn_count 1 (`trajectory` is then
    its experience_id).
    """

    SCHEMA: ClassVar[str] = "rft.events.Experience"

    experience_id: str
    task_id: str
    group_id: str
    group_size: int
    explorer_id: str
    model_version: int
    prompt_ids: npt.NDArray[np.int32]
    response_ids: npt.NDArray[np.int32]
    logprobs: npt.NDArray[np.float32]
    action_mask: npt.NDArray[np.bool_] | None = None  # None: every response token is an action
    reward: float = 0.0
    token_rewards: npt.NDArray[np.float32] | None = None
    prompt_text: str = ""
    response_text: str = ""
    info: dict[str, str] = field(default_factory=dict)
    truncated: bool = False
    metrics: dict[str, float] = field(default_factory=dict)
    logprob_temperature: float = field(default=1.0, metadata=FINITE_POSITIVE)
    explorer_group: str = ""
    trajectory_id: str = ""
    turn: int = field(default=0, metadata=at_least(0))
    turn_count: int = field(default=1, metadata=at_least(1))
    created_at: int = field(default_factory=now_ms)

    def _invariants(self) -> None:
        # every per-token array has one value per response token
        n = self.response_ids.shape[0]
        if self.action_mask is None:
            object.__setattr__(self, "action_mask", np.ones(n, dtype=MASK_DTYPE))
        for name in _PER_TOKEN:
            values = getattr(self, name)
            if values is not None and values.shape[0] != n:
                raise fail("Experience", name, f"has {values.shape[0]} values for {n} tokens")
        if self.turn >= self.turn_count:
            raise fail(
                "Experience", "turn", f"{self.turn} is not below turn_count {self.turn_count}"
            )
        if self.turn_count > 1 and not self.trajectory_id:
            raise fail(
                "Experience", "trajectory_id", "is empty on a step of a multi-step trajectory"
            )

    @property
    def trajectory(self) -> str:
        """The trajectory this experience belongs to: trajectory_id, or itself when empty."""
        return self.trajectory_id or self.experience_id

    @property
    def prompt_length(self) -> int:
        return int(self.prompt_ids.shape[0])

    @property
    def response_length(self) -> int:
        return int(self.response_ids.shape[0])

    @property
    def total_tokens(self) -> int:
        """Prompt plus response tokens: the sequence length the trainer sees."""
        return self.prompt_length + self.response_length

    @property
    def action_count(self) -> int:
        """Response tokens the policy acted on (the tokens a policy loss covers)."""
        assert self.action_mask is not None  # set by _invariants
        return int(np.count_nonzero(self.action_mask))

    def token_ids(self) -> npt.NDArray[np.int32]:
        """Prompt and response ids as one int32 sequence."""
        return np.concatenate([self.prompt_ids, self.response_ids])

    def __eq__(self, other: object) -> bool:
        return _records_equal(self, other)

    __hash__ = None  # type: ignore[assignment]


_PER_TOKEN = ("logprobs", "action_mask", "token_rewards")  # one value per response token


def _records_equal(mine: Any, theirs: object) -> bool | Any:
    """Records holding token arrays: equal when of one type and every field is `_same`."""
    names = [f.name for f in dataclasses.fields(mine)]
    if type(theirs) is not type(mine):
        return NotImplemented
    return all(_same(getattr(mine, name), getattr(theirs, name)) for name in names)


def _same(mine: Any, theirs: Any) -> bool:
    """Arrays compare by dtype and bytes (NaN payloads included), everything else with ==."""
    if isinstance(mine, np.ndarray) or isinstance(theirs, np.ndarray):
        return (
            isinstance(mine, np.ndarray)
            and isinstance(theirs, np.ndarray)
            and mine.dtype == theirs.dtype
            and mine.tobytes() == theirs.tobytes()
        )
    return bool(mine == theirs)


@dataclass(frozen=True, slots=True)
class ManifestEntry(SchemaRecord):
    """One object of a checkpoint: name relative to the checkpoint uri, size, sha256 hex."""

    SCHEMA: ClassVar[str] = "rft.events.ManifestEntry"

    name: str
    size: int = field(metadata=at_least(0))
    sha256: str


@dataclass(frozen=True, slots=True)
class TopicOffset(SchemaRecord):
    """A position in one Kafka partition: the next offset to read."""

    SCHEMA: ClassVar[str] = "rft.events.TopicOffset"

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class OffsetRanges(SchemaRecord):
    """Offsets of one partition as (first, last) runs of consecutive offsets, both included."""

    SCHEMA: ClassVar[str] = "rft.events.OffsetRanges"

    topic: str
    partition: int
    ranges: tuple[tuple[int, int], ...] = ()

    def _invariants(self) -> None:
        for i, (first, last) in enumerate(self.ranges):
            if not 0 <= first <= last:
                raise fail("OffsetRanges", f"ranges[{i}]", f"[{first}, {last}] is not a run")

    def offsets(self) -> Iterator[int]:
        for first, last in self.ranges:
            yield from range(first, last + 1)


@dataclass(frozen=True, slots=True)
class RetrainedOffset(SchemaRecord):
    """An experience offset trained `times` (> 1) times by one version's steps."""

    SCHEMA: ClassVar[str] = "rft.events.RetrainedOffset"

    topic: str
    partition: int
    offset: int
    times: int


@dataclass(frozen=True, slots=True)
class TrainedLog(SchemaRecord):
    """What one version's steps (those after its parent) trained and settled: the trainer's
    `trained_log` and `settled_ahead`, as saved in the version's sampler state."""

    SCHEMA: ClassVar[str] = "rft.events.TrainedLog"

    trained: tuple[OffsetRanges, ...] = ()
    retrained: tuple[RetrainedOffset, ...] = ()
    settled: tuple[OffsetRanges, ...] = ()
    settled_ahead: tuple[OffsetRanges, ...] = ()

    @classmethod
    def of_lists(
        cls,
        trained: Sequence[Sequence[Any]] = (),
        retrained: Sequence[Sequence[Any]] = (),
        settled: Sequence[Sequence[Any]] = (),
        settled_ahead: Sequence[Sequence[Any]] = (),
    ) -> TrainedLog:
        """From the JSON lists of a sampler state: [topic, partition, [[first, last], ...]] per
        partition, and [topic, partition, offset, times] per retrained offset."""

        def runs(entries: Sequence[Sequence[Any]]) -> tuple[OffsetRanges, ...]:
            return tuple(OffsetRanges(t, p, tuple(tuple(r) for r in rs)) for t, p, rs in entries)

        return cls(
            trained=runs(trained),
            retrained=tuple(RetrainedOffset(t, p, o, n) for t, p, o, n in retrained),
            settled=runs(settled),
            settled_ahead=runs(settled_ahead),
        )


@dataclass(frozen=True, slots=True)
class WeightVersion(SchemaRecord):
    """Announcement that a model version is complete and verified in the checkpoint store.

    `trained_log` (schema v2) says what the version's own steps trained, so the log alone proves
    a run's training after retention pruned the version's files; None in events before v2.
    """

    SCHEMA: ClassVar[str] = "rft.events.WeightVersion"

    version: int
    train_step: int
    uri: str
    manifest: tuple[ManifestEntry, ...] = ()
    consumed_offsets: tuple[TopicOffset, ...] = ()
    parent_version: int | None = None
    created_at: int = field(default_factory=now_ms)
    trained_log: TrainedLog | None = None


@dataclass(frozen=True, slots=True)
class Metric(SchemaRecord):
    """Named numeric measurements from one component at one step."""

    SCHEMA: ClassVar[str] = "rft.events.Metric"

    component: str
    run: str
    step: int
    values: dict[str, float]
    tags: dict[str, str] = field(default_factory=dict)
    timestamp: int = field(default_factory=now_ms)


@dataclass(frozen=True, slots=True)
class DeadLetter(SchemaRecord):
    """An event a consumer could not process, with its origin and the error it raised."""

    SCHEMA: ClassVar[str] = "rft.events.DeadLetter"

    source_topic: str
    source_partition: int
    source_offset: int
    payload: bytes
    error_class: str
    error_message: str
    consumer: str = ""
    source_key: bytes | None = None
    headers: dict[str, bytes] = field(default_factory=dict)
    created_at: int = field(default_factory=now_ms)

    @classmethod
    def for_error(
        cls,
        error: BaseException,
        *,
        topic: str,
        partition: int,
        offset: int,
        payload: bytes,
        consumer: str,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes] = (),
    ) -> DeadLetter:
        """Park `payload` read at topic/partition/offset that raised `error` in `consumer`."""
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        kind = type(error)
        return cls(
            source_topic=topic,
            source_partition=partition,
            source_offset=offset,
            payload=payload,
            error_class=f"{kind.__module__}.{kind.__qualname__}",
            error_message=str(error),
            consumer=consumer,
            source_key=key,
            headers={name: value or b"" for name, value in pairs},
        )


@dataclass(frozen=True, slots=True)
class SyncRequest(SchemaRecord):
    """An explorer asks the trainer for newer weights (explorer-driven synchronization)."""

    SCHEMA: ClassVar[str] = "rft.events.SyncRequest"

    explorer_id: str
    current_version: int
    step: int
    requested_at: int = field(default_factory=now_ms)


@dataclass(frozen=True, slots=True)
class Claim(SchemaRecord):
    """A process claims a transactional id; the newest committed Claim of an id names its holder
    (rft.events.claims)."""

    SCHEMA: ClassVar[str] = "rft.events.Claim"

    holder: str
    token: str
    host: str
    pid: int
    claimed_at: int = field(default_factory=now_ms)


SERVE_ENDPOINTS = ("chat.completions", "completions")
SESSION_OUTCOMES = ("feedback", "evaluated", "expired")


@dataclass(frozen=True, slots=True, eq=False)
class ServeChoice(SchemaRecord):
    """One reply of a served call: its ids and logprobs (numpy, as in Experience), its text,
    the engine's finish reason and the assistant message returned, as JSON object text."""

    SCHEMA: ClassVar[str] = "rft.events.ServeChoice"

    response_ids: npt.NDArray[np.int32]
    logprobs: npt.NDArray[np.float32]
    text: str
    finish_reason: str
    message: dict[str, Any]

    def _invariants(self) -> None:
        n = self.response_ids.shape[0]
        if self.logprobs.shape[0] != n:
            raise fail("ServeChoice", "logprobs", f"has {self.logprobs.shape[0]} values for {n}")

    def __eq__(self, other: object) -> bool:
        return _records_equal(self, other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, eq=False)
class ServeCall(SchemaRecord):
    """One call a serve-mode endpoint answered (rft.consumers.serve): what was fed, what came
    back, which version answered, and the call it continues within its session."""

    SCHEMA: ClassVar[str] = "rft.events.ServeCall"

    session_id: str
    task_id: str
    call_id: str
    parent_call_id: str
    parent_choice: int
    endpoint: str = field(metadata=one_of(SERVE_ENDPOINTS))
    request: dict[str, Any]
    prompt_ids: npt.NDArray[np.int32]
    choices: tuple[ServeChoice, ...]
    logprob_temperature: float = field(metadata=FINITE_POSITIVE)
    model_version: int
    server_id: str
    created_at: int = field(default_factory=now_ms)

    def __eq__(self, other: object) -> bool:
        return _records_equal(self, other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class ServeSessionEnd(SchemaRecord):
    """A serve-mode session closed, in the transaction of its experiences or its dead letter."""

    SCHEMA: ClassVar[str] = "rft.events.ServeSessionEnd"

    session_id: str
    outcome: str = field(metadata=one_of(SESSION_OUTCOMES))
    reward: float = 0.0
    experiences: int = field(default=0, metadata=at_least(0))
    detail: str = ""
    created_at: int = field(default_factory=now_ms)


# The states and finishing reasons a ComponentStatus may carry (its schema's doc lists them too)
COMPONENT_STATES = ("running", "waiting", "finished")
FINISH_REASONS = ("", "total_steps", "tasks_exhausted", "stopped", "input_ended", "short")


@dataclass(frozen=True, slots=True)
class ComponentStatus(SchemaRecord):
    """What one process of a run is doing: running, waiting (and on what), finished (and why).

    Sent on the control topic keyed by the process; the newest one of a process is its state.
    `tasks_left`: tasks its explorer group had not committed when it finished (-1 unknown).
    """

    SCHEMA: ClassVar[str] = "rft.events.ComponentStatus"

    component: str
    instance: str
    group: str
    state: str = field(metadata=one_of(COMPONENT_STATES))
    reason: str = field(default="", metadata=one_of(FINISH_REASONS))
    detail: str = ""
    step: int = 0
    total_steps: int = 0
    experience_topic: str = ""
    group_size: int = 0
    tasks_left: int = -1
    created_at: int = field(default_factory=now_ms)

    @property
    def finished(self) -> bool:
        return self.state == "finished"


Event = (
    Task
    | Experience
    | WeightVersion
    | Metric
    | DeadLetter
    | SyncRequest
    | ComponentStatus
    | Claim
    | ServeCall
    | ServeSessionEnd
)

EVENT_TYPES: tuple[type[Any], ...] = (
    Task,
    Experience,
    WeightVersion,
    Metric,
    DeadLetter,
    SyncRequest,
    Claim,
    ComponentStatus,
    ServeCall,
    ServeSessionEnd,
)
"""Every event type, each naming its Avro record in `SCHEMA`."""

RECORD_TYPES: tuple[type[SchemaRecord], ...] = (
    *EVENT_TYPES,
    ManifestEntry,
    TopicOffset,
    OffsetRanges,
    RetrainedOffset,
    TrainedLog,
    ServeChoice,
)
"""Every record dataclass: the events and the records nested in them."""

__all__ = [
    "COMPONENT_STATES",
    "EVENT_TYPES",
    "RECORD_TYPES",
    "Claim",
    "FINISH_REASONS",
    "ComponentStatus",
    "DeadLetter",
    "Event",
    "Experience",
    "FLOAT_DTYPE",
    "ID_DTYPE",
    "InvalidEventError",
    "MASK_DTYPE",
    "ManifestEntry",
    "Metric",
    "OffsetRanges",
    "RetrainedOffset",
    "SERVE_ENDPOINTS",
    "SESSION_OUTCOMES",
    "ServeCall",
    "ServeChoice",
    "ServeSessionEnd",
    "SyncRequest",
    "Task",
    "TopicOffset",
    "TrainedLog",
    "WeightVersion",
    "now_ms",
]
