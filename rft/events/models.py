"""The events that move between rft components, as plain validated dataclasses.

Each event knows the Avro record it maps to (`SCHEMA`), how to become a record (`to_record`) and how
to be built from one (`from_record`). Construction validates types, ranges and token-array lengths,
so an invalid event cannot exist. Models are pure: no Kafka, no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from rft.errors import EncodeError

ID_DTYPE = np.dtype("<i4")
FLOAT_DTYPE = np.dtype("<f4")
MASK_DTYPE = np.dtype(np.bool_)

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_NATIVE_LE = sys.byteorder == "little"


class InvalidEventError(EncodeError, ValueError):
    """An event was built with a wrong-typed, out-of-range or inconsistent field."""


def now_ms() -> int:
    """Current wall-clock time in milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


def _fail(event: str, name: str, message: str) -> InvalidEventError:
    return InvalidEventError(f"{event}.{name}: {message}")


def _check_str(event: str, name: str, value: object) -> str:
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)
    raise _fail(event, name, f"expected str, got {type(value).__name__} {value!r:.80}")


def _check_int(event: str, name: str, value: object, bounds: tuple[int, int] = _INT64) -> int:
    # bool is an int subclass; a bool where a count belongs is a bug, not a number
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise _fail(event, name, f"expected int, got {type(value).__name__} {value!r:.80}")
        value = int(value)
    if not bounds[0] <= value <= bounds[1]:
        raise _fail(event, name, f"{value} is outside [{bounds[0]}, {bounds[1]}]")
    return value


def _check_float(event: str, name: str, value: object) -> float:
    if type(value) is float:
        return value
    if isinstance(value, bool) or not isinstance(value, float | int | np.floating | np.integer):
        raise _fail(event, name, f"expected float, got {type(value).__name__} {value!r:.80}")
    return float(value)


def _check_temperature(event: str, name: str, value: float) -> float:
    # a logprob temperature divides the logits: 0, negative, inf or NaN has no meaning there
    if not (math.isfinite(value) and value > 0.0):
        raise _fail(event, name, f"must be finite and > 0, got {value!r}")
    return value


def _check_bool(event: str, name: str, value: object) -> bool:
    if type(value) is bool:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise _fail(event, name, f"expected bool, got {type(value).__name__} {value!r:.80}")


def _check_bytes(event: str, name: str, value: object) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise _fail(event, name, f"expected bytes, got {type(value).__name__}")


def _check_str_map(event: str, name: str, value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _fail(event, name, f"expected a mapping of str to str, got {type(value).__name__}")
    for key, item in value.items():
        if type(key) is not str or type(item) is not str:
            raise _fail(event, name, f"entry {key!r:.40}: {item!r:.40} is not str -> str")
    return value if type(value) is dict else dict(value)


def _check_float_map(event: str, name: str, value: object) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise _fail(event, name, f"expected a mapping of str to float, got {type(value).__name__}")
    out: dict[str, float] | None = None
    for key, item in value.items():
        if type(key) is not str:
            raise _fail(event, name, f"key {key!r:.40} is not str")
        if type(item) is not float:
            if isinstance(item, bool) or not isinstance(
                item, float | int | np.floating | np.integer
            ):
                raise _fail(event, name, f"entry {key!r:.40}: {item!r:.40} is not a number")
            out = out if out is not None else dict(value)
            out[key] = float(item)
    if out is not None:
        return out
    return value if type(value) is dict else dict(value)


def _check_bytes_map(event: str, name: str, value: object) -> dict[str, bytes]:
    if not isinstance(value, Mapping):
        raise _fail(event, name, f"expected a mapping of str to bytes, got {type(value).__name__}")
    out: dict[str, bytes] = {}
    for key, item in value.items():
        if type(key) is not str:
            raise _fail(event, name, f"key {key!r:.40} is not str")
        out[key] = _check_bytes(event, f"{name}[{key!r}]", item)
    return out


def _json_text(event: str, name: str, value: object) -> str:
    if not isinstance(value, Mapping):
        raise _fail(event, name, f"expected a JSON object (dict), got {type(value).__name__}")
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise _fail(event, name, f"is not strict JSON: {exc}") from exc


def _json_object(name: str, text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"{name} is JSON {type(value).__name__}, expected an object")
    return value


def _int_array(event: str, name: str, value: object) -> npt.NDArray[np.int32]:
    if type(value) is np.ndarray and value.dtype == ID_DTYPE and value.ndim == 1:
        return value
    arr = np.asarray(value)
    if arr.ndim != 1:
        raise _fail(event, name, f"expected a 1-d sequence of token ids, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=ID_DTYPE)
    if arr.dtype.kind not in "iu":
        raise _fail(event, name, f"expected integer token ids, got dtype {arr.dtype}")
    low, high = int(arr.min()), int(arr.max())
    if low < _INT32[0] or high > _INT32[1]:
        raise _fail(event, name, f"token id range [{low}, {high}] does not fit int32")
    return arr.astype(ID_DTYPE)


def _float_array(event: str, name: str, value: object) -> npt.NDArray[np.float32]:
    if type(value) is np.ndarray and value.dtype == FLOAT_DTYPE and value.ndim == 1:
        return value
    arr = np.asarray(value)
    if arr.ndim != 1:
        raise _fail(event, name, f"expected a 1-d sequence of floats, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=FLOAT_DTYPE)
    if arr.dtype.kind not in "fiu":
        raise _fail(event, name, f"expected floats, got dtype {arr.dtype}")
    return arr.astype(FLOAT_DTYPE)


def _mask_array(event: str, name: str, value: object) -> npt.NDArray[np.bool_]:
    if type(value) is np.ndarray and value.dtype == MASK_DTYPE and value.ndim == 1:
        return value
    arr = np.asarray(value)
    if arr.ndim != 1:
        raise _fail(event, name, f"expected a 1-d mask, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=MASK_DTYPE)
    if arr.dtype.kind == "b":
        return arr.astype(MASK_DTYPE)
    if arr.dtype.kind not in "iu" or int(arr.min()) < 0 or int(arr.max()) > 1:
        raise _fail(event, name, "expected booleans or 0/1 integers")
    return arr.astype(MASK_DTYPE)


def _packed(arr: np.ndarray, dtype: np.dtype) -> bytes:
    # arrays already hold little-endian dtypes; only a big-endian host's native arrays convert
    if _NATIVE_LE or arr.dtype == dtype:
        return arr.tobytes()
    return arr.astype(dtype).tobytes()


def _unpack_mask(raw: bytes) -> npt.NDArray[np.bool_]:
    if raw.translate(None, b"\x00\x01"):
        raise ValueError("action_mask holds bytes other than 0 and 1")
    return np.frombuffer(raw, dtype=MASK_DTYPE)


@dataclass(frozen=True, slots=True)
class Task:
    """One unit of exploration: a raw taskset row plus how to roll it out and score it.

    `position` is the task's place in the sequence its publisher wrote (from 0); None for
    events written before schema v2, which `published_order` places by (epoch, index).
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
    repeat_times: int = 1
    is_eval: bool = False
    created_at: int = field(default_factory=now_ms)
    position: int | None = None

    def __post_init__(self) -> None:
        e, put = "Task", object.__setattr__
        _check_str(e, "task_id", self.task_id)
        _check_str(e, "taskset", self.taskset)
        put(self, "epoch", _check_int(e, "epoch", self.epoch, _INT32))
        put(self, "index", _check_int(e, "index", self.index))
        if not isinstance(self.payload, Mapping):
            raise _fail(e, "payload", f"expected a dict, got {type(self.payload).__name__}")
        put(self, "format", _check_str_map(e, "format", self.format))
        _check_str(e, "workflow", self.workflow)
        _check_str(e, "reward_fn", self.reward_fn)
        if not isinstance(self.rollout_args, Mapping):
            raise _fail(e, "rollout_args", f"expected a dict, got {type(self.rollout_args)}")
        put(self, "repeat_times", _check_int(e, "repeat_times", self.repeat_times, _INT32))
        if self.repeat_times < 1:
            raise _fail(e, "repeat_times", f"must be >= 1, got {self.repeat_times}")
        _check_bool(e, "is_eval", self.is_eval)
        put(self, "created_at", _check_int(e, "created_at", self.created_at))
        if self.position is not None:
            put(self, "position", _check_int(e, "position", self.position))
            if self.position < 0:
                raise _fail(e, "position", f"must be >= 0, got {self.position}")

    @property
    def published_order(self) -> tuple[int, int]:
        """Where this task comes in its publisher's sequence, as a sort key: (epoch, position).
        A task written before schema v2 has no position: (epoch, index), file order within its
        epoch (the selector's order of such a publish is not recorded anywhere)."""
        return (self.epoch, self.index if self.position is None else self.position)

    def to_record(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "taskset": self.taskset,
            "epoch": self.epoch,
            "index": self.index,
            "position": self.position,
            "payload": _json_text("Task", "payload", self.payload),
            "format": self.format,
            "workflow": self.workflow,
            "reward_fn": self.reward_fn,
            "rollout_args": _json_text("Task", "rollout_args", self.rollout_args),
            "repeat_times": self.repeat_times,
            "is_eval": self.is_eval,
            "created_at": self.created_at,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Task:
        return cls(
            task_id=record["task_id"],
            taskset=record["taskset"],
            epoch=record["epoch"],
            index=record["index"],
            payload=_json_object("payload", record["payload"]),
            format=record["format"],
            workflow=record["workflow"],
            reward_fn=record["reward_fn"],
            rollout_args=_json_object("rollout_args", record["rollout_args"]),
            repeat_times=record["repeat_times"],
            is_eval=record["is_eval"],
            created_at=record["created_at"],
            position=record.get("position"),
        )


@dataclass(frozen=True, slots=True, eq=False)
class Experience:
    """One scored rollout of a task, tagged with the model version that generated it.

    Token arrays are numpy: prompt_ids / response_ids int32, logprobs float32 and action_mask bool
    (one per response token), token_rewards float32 (one per response token) or None. Lists are
    accepted and converted. Equality compares arrays bit for bit.

    logprob_temperature: the T of `logprobs` = log_softmax(logits / T) (finite, > 0); the trainer
    recomputes at the same T. explorer_group: the consumer group of the explorer that made it.
    Events written before schema v3 read as T = 1.0 and explorer_group "".
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
    logprob_temperature: float = 1.0
    explorer_group: str = ""
    created_at: int = field(default_factory=now_ms)

    def __post_init__(self) -> None:
        e, put = "Experience", object.__setattr__
        _check_str(e, "experience_id", self.experience_id)
        _check_str(e, "task_id", self.task_id)
        _check_str(e, "group_id", self.group_id)
        put(self, "group_size", _check_int(e, "group_size", self.group_size, _INT32))
        _check_str(e, "explorer_id", self.explorer_id)
        put(self, "model_version", _check_int(e, "model_version", self.model_version))
        put(self, "prompt_ids", _int_array(e, "prompt_ids", self.prompt_ids))
        response = _int_array(e, "response_ids", self.response_ids)
        put(self, "response_ids", response)
        n = response.shape[0]
        logprobs = _float_array(e, "logprobs", self.logprobs)
        if logprobs.shape[0] != n:
            raise _fail(e, "logprobs", f"has {logprobs.shape[0]} values for {n} response tokens")
        put(self, "logprobs", logprobs)
        if self.action_mask is None:
            mask = np.ones(n, dtype=MASK_DTYPE)
        else:
            mask = _mask_array(e, "action_mask", self.action_mask)
            if mask.shape[0] != n:
                raise _fail(e, "action_mask", f"has {mask.shape[0]} values for {n} response tokens")
        put(self, "action_mask", mask)
        put(self, "reward", _check_float(e, "reward", self.reward))
        if self.token_rewards is not None:
            token_rewards = _float_array(e, "token_rewards", self.token_rewards)
            if token_rewards.shape[0] != n:
                raise _fail(
                    e, "token_rewards", f"has {token_rewards.shape[0]} values for {n} tokens"
                )
            put(self, "token_rewards", token_rewards)
        _check_str(e, "prompt_text", self.prompt_text)
        _check_str(e, "response_text", self.response_text)
        put(self, "info", _check_str_map(e, "info", self.info))
        _check_bool(e, "truncated", self.truncated)
        put(self, "metrics", _check_float_map(e, "metrics", self.metrics))
        temperature = _check_float(e, "logprob_temperature", self.logprob_temperature)
        put(self, "logprob_temperature", _check_temperature(e, "logprob_temperature", temperature))
        _check_str(e, "explorer_group", self.explorer_group)
        put(self, "created_at", _check_int(e, "created_at", self.created_at))

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
        assert self.action_mask is not None  # set by __post_init__
        return int(np.count_nonzero(self.action_mask))

    def token_ids(self) -> npt.NDArray[np.int32]:
        """Prompt and response ids as one int32 sequence."""
        return np.concatenate([self.prompt_ids, self.response_ids])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Experience):
            return NotImplemented
        for name in _EXPERIENCE_SCALARS:
            if getattr(self, name) != getattr(other, name):
                return False
        for name in _EXPERIENCE_ARRAYS:
            mine, theirs = getattr(self, name), getattr(other, name)
            if (mine is None) != (theirs is None):
                return False
            if mine is not None and (
                mine.dtype != theirs.dtype or mine.tobytes() != theirs.tobytes()
            ):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]

    def to_record(self) -> dict[str, Any]:
        assert self.action_mask is not None  # set by __post_init__
        token_rewards = self.token_rewards
        return {
            "experience_id": self.experience_id,
            "task_id": self.task_id,
            "group_id": self.group_id,
            "group_size": self.group_size,
            "explorer_id": self.explorer_id,
            "model_version": self.model_version,
            "prompt_ids": _packed(self.prompt_ids, ID_DTYPE),
            "response_ids": _packed(self.response_ids, ID_DTYPE),
            "logprobs": _packed(self.logprobs, FLOAT_DTYPE),
            "action_mask": self.action_mask.tobytes(),
            "reward": self.reward,
            "token_rewards": None if token_rewards is None else _packed(token_rewards, FLOAT_DTYPE),
            "prompt_text": self.prompt_text,
            "response_text": self.response_text,
            "info": self.info,
            "truncated": self.truncated,
            "metrics": self.metrics,
            "logprob_temperature": self.logprob_temperature,
            "explorer_group": self.explorer_group,
            "created_at": self.created_at,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Experience:
        """Build from a decoded Avro record.

        The record's scalar types are already guaranteed by the schema, so this skips the
        per-field type checks of `__init__` (the decode hot path) and checks only what Avro
        cannot: packed-array sizes, mask bytes, int32 range, matching lengths and a usable
        logprob temperature. Fields missing from the record (an old reader schema) take the
        defaults that events written before them mean.
        """
        response_ids = np.frombuffer(record["response_ids"], dtype=ID_DTYPE)
        n = response_ids.shape[0]
        logprobs = np.frombuffer(record["logprobs"], dtype=FLOAT_DTYPE)
        mask = _unpack_mask(record["action_mask"])
        raw_rewards = record.get("token_rewards")
        token_rewards = None
        if raw_rewards is not None:
            token_rewards = np.frombuffer(raw_rewards, dtype=FLOAT_DTYPE)
            if token_rewards.shape[0] != n:
                raise _fail("Experience", "token_rewards", f"has {token_rewards.shape[0]} for {n}")
        if logprobs.shape[0] != n or mask.shape[0] != n:
            raise _fail(
                "Experience",
                "logprobs",
                f"{logprobs.shape[0]} logprobs and {mask.shape[0]} mask values for {n} tokens",
            )
        temperature = _check_temperature(
            "Experience", "logprob_temperature", record.get("logprob_temperature", 1.0)
        )
        group_size = record["group_size"]
        if not _INT32[0] <= group_size <= _INT32[1]:
            raise _fail("Experience", "group_size", f"{group_size} does not fit int32")
        obj = object.__new__(cls)
        put = object.__setattr__
        put(obj, "experience_id", record["experience_id"])
        put(obj, "task_id", record["task_id"])
        put(obj, "group_id", record["group_id"])
        put(obj, "group_size", group_size)
        put(obj, "explorer_id", record["explorer_id"])
        put(obj, "model_version", record["model_version"])
        put(obj, "prompt_ids", np.frombuffer(record["prompt_ids"], dtype=ID_DTYPE))
        put(obj, "response_ids", response_ids)
        put(obj, "logprobs", logprobs)
        put(obj, "action_mask", mask)
        put(obj, "reward", record["reward"])
        put(obj, "token_rewards", token_rewards)
        put(obj, "prompt_text", record["prompt_text"])
        put(obj, "response_text", record["response_text"])
        put(obj, "info", record["info"])
        put(obj, "truncated", record.get("truncated", False))
        put(obj, "metrics", record.get("metrics", {}))
        put(obj, "logprob_temperature", temperature)
        put(obj, "explorer_group", record.get("explorer_group", ""))
        put(obj, "created_at", record["created_at"])
        return obj


_EXPERIENCE_ARRAYS = ("prompt_ids", "response_ids", "logprobs", "action_mask", "token_rewards")
_EXPERIENCE_SCALARS = tuple(
    f.name for f in dataclasses.fields(Experience) if f.name not in _EXPERIENCE_ARRAYS
)


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    """One object of a checkpoint: name relative to the checkpoint uri, size, sha256 hex."""

    name: str
    size: int
    sha256: str

    def __post_init__(self) -> None:
        _check_str("ManifestEntry", "name", self.name)
        object.__setattr__(self, "size", _check_int("ManifestEntry", "size", self.size))
        if self.size < 0:
            raise _fail("ManifestEntry", "size", f"must be >= 0, got {self.size}")
        _check_str("ManifestEntry", "sha256", self.sha256)


@dataclass(frozen=True, slots=True)
class TopicOffset:
    """A position in one Kafka partition: the next offset to read."""

    topic: str
    partition: int
    offset: int

    def __post_init__(self) -> None:
        _check_str("TopicOffset", "topic", self.topic)
        object.__setattr__(
            self, "partition", _check_int("TopicOffset", "partition", self.partition, _INT32)
        )
        object.__setattr__(self, "offset", _check_int("TopicOffset", "offset", self.offset))


@dataclass(frozen=True, slots=True)
class OffsetRanges:
    """Offsets of one partition as (first, last) runs of consecutive offsets, both included."""

    topic: str
    partition: int
    ranges: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        e, put = "OffsetRanges", object.__setattr__
        _check_str(e, "topic", self.topic)
        put(self, "partition", _check_int(e, "partition", self.partition, _INT32))
        runs = []
        for i, run in enumerate(self.ranges):
            first, last = (_check_int(e, f"ranges[{i}]", x) for x in run)
            if not 0 <= first <= last:
                raise _fail(e, f"ranges[{i}]", f"[{first}, {last}] is not a run of offsets")
            runs.append((first, last))
        put(self, "ranges", tuple(runs))

    def offsets(self) -> Iterator[int]:
        for first, last in self.ranges:
            yield from range(first, last + 1)


@dataclass(frozen=True, slots=True)
class RetrainedOffset:
    """An experience offset trained `times` (> 1) times by one version's steps."""

    topic: str
    partition: int
    offset: int
    times: int

    def __post_init__(self) -> None:
        e, put = "RetrainedOffset", object.__setattr__
        _check_str(e, "topic", self.topic)
        put(self, "partition", _check_int(e, "partition", self.partition, _INT32))
        put(self, "offset", _check_int(e, "offset", self.offset))
        put(self, "times", _check_int(e, "times", self.times, _INT32))


@dataclass(frozen=True, slots=True)
class TrainedLog:
    """What one version's steps (those after its parent) trained and settled: the trainer's
    `trained_log` and `settled_ahead`, as saved in the version's sampler state."""

    trained: tuple[OffsetRanges, ...] = ()
    retrained: tuple[RetrainedOffset, ...] = ()
    settled: tuple[OffsetRanges, ...] = ()
    settled_ahead: tuple[OffsetRanges, ...] = ()

    def __post_init__(self) -> None:
        e, put = "TrainedLog", object.__setattr__
        for name in ("trained", "settled", "settled_ahead"):
            put(self, name, _tuple_of(e, name, getattr(self, name), OffsetRanges))
        put(self, "retrained", _tuple_of(e, "retrained", self.retrained, RetrainedOffset))

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

    def to_record(self) -> dict[str, Any]:
        def runs(entries: tuple[OffsetRanges, ...]) -> list[dict[str, Any]]:
            return [
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "ranges": [{"first": a, "last": b} for a, b in r.ranges],
                }
                for r in entries
            ]

        return {
            "trained": runs(self.trained),
            "retrained": [
                {"topic": r.topic, "partition": r.partition, "offset": r.offset, "times": r.times}
                for r in self.retrained
            ],
            "settled": runs(self.settled),
            "settled_ahead": runs(self.settled_ahead),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TrainedLog:
        def runs(entries: Sequence[Mapping[str, Any]]) -> tuple[OffsetRanges, ...]:
            return tuple(
                OffsetRanges(
                    r["topic"], r["partition"], tuple((x["first"], x["last"]) for x in r["ranges"])
                )
                for r in entries
            )

        return cls(
            trained=runs(record["trained"]),
            retrained=tuple(RetrainedOffset(**r) for r in record["retrained"]),
            settled=runs(record["settled"]),
            settled_ahead=runs(record["settled_ahead"]),
        )


@dataclass(frozen=True, slots=True)
class WeightVersion:
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

    def __post_init__(self) -> None:
        e, put = "WeightVersion", object.__setattr__
        put(self, "version", _check_int(e, "version", self.version))
        put(self, "train_step", _check_int(e, "train_step", self.train_step))
        _check_str(e, "uri", self.uri)
        put(self, "manifest", _tuple_of(e, "manifest", self.manifest, ManifestEntry))
        put(
            self,
            "consumed_offsets",
            _tuple_of(e, "consumed_offsets", self.consumed_offsets, TopicOffset),
        )
        if self.parent_version is not None:
            put(self, "parent_version", _check_int(e, "parent_version", self.parent_version))
        put(self, "created_at", _check_int(e, "created_at", self.created_at))
        if self.trained_log is not None and not isinstance(self.trained_log, TrainedLog):
            raise _fail(e, "trained_log", f"expected TrainedLog, got {type(self.trained_log)}")

    def to_record(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "train_step": self.train_step,
            "uri": self.uri,
            "manifest": [
                {"name": m.name, "size": m.size, "sha256": m.sha256} for m in self.manifest
            ],
            "consumed_offsets": [
                {"topic": o.topic, "partition": o.partition, "offset": o.offset}
                for o in self.consumed_offsets
            ],
            "parent_version": self.parent_version,
            "created_at": self.created_at,
            "trained_log": None if self.trained_log is None else self.trained_log.to_record(),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> WeightVersion:
        log = record.get("trained_log")  # absent before v2
        return cls(
            version=record["version"],
            train_step=record["train_step"],
            uri=record["uri"],
            manifest=tuple(ManifestEntry(**m) for m in record["manifest"]),
            consumed_offsets=tuple(TopicOffset(**o) for o in record["consumed_offsets"]),
            parent_version=record.get("parent_version"),
            created_at=record["created_at"],
            trained_log=None if log is None else TrainedLog.from_record(log),
        )


def _tuple_of(event: str, name: str, value: object, kind: type) -> tuple[Any, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise _fail(event, name, f"expected a sequence of {kind.__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, kind):
            raise _fail(event, f"{name}[{i}]", f"expected {kind.__name__}, got {type(item)}")
    return tuple(value)


@dataclass(frozen=True, slots=True)
class Metric:
    """Named numeric measurements from one component at one step."""

    SCHEMA: ClassVar[str] = "rft.events.Metric"

    component: str
    run: str
    step: int
    values: dict[str, float]
    tags: dict[str, str] = field(default_factory=dict)
    timestamp: int = field(default_factory=now_ms)

    def __post_init__(self) -> None:
        e, put = "Metric", object.__setattr__
        _check_str(e, "component", self.component)
        _check_str(e, "run", self.run)
        put(self, "step", _check_int(e, "step", self.step))
        put(self, "values", _check_float_map(e, "values", self.values))
        put(self, "tags", _check_str_map(e, "tags", self.tags))
        put(self, "timestamp", _check_int(e, "timestamp", self.timestamp))

    def to_record(self) -> dict[str, Any]:
        return {
            "component": self.component,
            "run": self.run,
            "step": self.step,
            "values": self.values,
            "tags": self.tags,
            "timestamp": self.timestamp,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Metric:
        return cls(
            component=record["component"],
            run=record["run"],
            step=record["step"],
            values=record["values"],
            tags=record.get("tags", {}),
            timestamp=record["timestamp"],
        )


@dataclass(frozen=True, slots=True)
class DeadLetter:
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

    def __post_init__(self) -> None:
        e, put = "DeadLetter", object.__setattr__
        _check_str(e, "source_topic", self.source_topic)
        put(
            self,
            "source_partition",
            _check_int(e, "source_partition", self.source_partition, _INT32),
        )
        put(self, "source_offset", _check_int(e, "source_offset", self.source_offset))
        put(self, "payload", _check_bytes(e, "payload", self.payload))
        _check_str(e, "error_class", self.error_class)
        _check_str(e, "error_message", self.error_message)
        _check_str(e, "consumer", self.consumer)
        if self.source_key is not None:
            put(self, "source_key", _check_bytes(e, "source_key", self.source_key))
        put(self, "headers", _check_bytes_map(e, "headers", self.headers))
        put(self, "created_at", _check_int(e, "created_at", self.created_at))

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

    def to_record(self) -> dict[str, Any]:
        return {
            "source_topic": self.source_topic,
            "source_partition": self.source_partition,
            "source_offset": self.source_offset,
            "source_key": self.source_key,
            "payload": self.payload,
            "headers": self.headers,
            "error_class": self.error_class,
            "error_message": self.error_message,
            "consumer": self.consumer,
            "created_at": self.created_at,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> DeadLetter:
        return cls(
            source_topic=record["source_topic"],
            source_partition=record["source_partition"],
            source_offset=record["source_offset"],
            payload=record["payload"],
            error_class=record["error_class"],
            error_message=record["error_message"],
            consumer=record["consumer"],
            source_key=record.get("source_key"),
            headers=record["headers"],
            created_at=record["created_at"],
        )


@dataclass(frozen=True, slots=True)
class SyncRequest:
    """An explorer asks the trainer for newer weights (explorer-driven synchronization)."""

    SCHEMA: ClassVar[str] = "rft.events.SyncRequest"

    explorer_id: str
    current_version: int
    step: int
    requested_at: int = field(default_factory=now_ms)

    def __post_init__(self) -> None:
        e, put = "SyncRequest", object.__setattr__
        _check_str(e, "explorer_id", self.explorer_id)
        put(self, "current_version", _check_int(e, "current_version", self.current_version))
        put(self, "step", _check_int(e, "step", self.step))
        put(self, "requested_at", _check_int(e, "requested_at", self.requested_at))

    def to_record(self) -> dict[str, Any]:
        return {
            "explorer_id": self.explorer_id,
            "current_version": self.current_version,
            "step": self.step,
            "requested_at": self.requested_at,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SyncRequest:
        return cls(
            explorer_id=record["explorer_id"],
            current_version=record["current_version"],
            step=record["step"],
            requested_at=record["requested_at"],
        )


@dataclass(frozen=True, slots=True)
class Claim:
    """A process claims a transactional id; the newest committed Claim of an id names its holder
    (rft.events.claims)."""

    SCHEMA: ClassVar[str] = "rft.events.Claim"

    holder: str
    token: str
    host: str
    pid: int
    claimed_at: int = field(default_factory=now_ms)

    def __post_init__(self) -> None:
        e, put = "Claim", object.__setattr__
        for name in ("holder", "token", "host"):
            _check_str(e, name, getattr(self, name))
        put(self, "pid", _check_int(e, "pid", self.pid))
        put(self, "claimed_at", _check_int(e, "claimed_at", self.claimed_at))

    def to_record(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "token": self.token,
            "host": self.host,
            "pid": self.pid,
            "claimed_at": self.claimed_at,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Claim:
        return cls(
            holder=record["holder"],
            token=record["token"],
            host=record["host"],
            pid=record["pid"],
            claimed_at=record["claimed_at"],
        )


# The states and finishing reasons a ComponentStatus may carry (its schema's doc lists them too)
COMPONENT_STATES = ("running", "waiting", "finished")
FINISH_REASONS = ("", "total_steps", "tasks_exhausted", "stopped", "input_ended", "short")


@dataclass(frozen=True, slots=True)
class ComponentStatus:
    """What one process of a run is doing: running, waiting (and on what), finished (and why).

    Sent on the control topic keyed by the process; the newest one of a process is its state.
    `tasks_left`: tasks its explorer group had not committed when it finished (-1 unknown).
    """

    SCHEMA: ClassVar[str] = "rft.events.ComponentStatus"
    FIELDS: ClassVar[tuple[str, ...]] = (
        "component",
        "instance",
        "group",
        "state",
        "reason",
        "detail",
        "step",
        "total_steps",
        "experience_topic",
        "group_size",
        "tasks_left",
        "created_at",
    )

    component: str
    instance: str
    group: str
    state: str
    reason: str = ""
    detail: str = ""
    step: int = 0
    total_steps: int = 0
    experience_topic: str = ""
    group_size: int = 0
    tasks_left: int = -1
    created_at: int = field(default_factory=now_ms)

    def __post_init__(self) -> None:
        e, put = "ComponentStatus", object.__setattr__
        for name in ("component", "instance", "group", "detail", "experience_topic"):
            _check_str(e, name, getattr(self, name))
        if self.state not in COMPONENT_STATES:
            raise _fail(e, "state", f"{self.state!r} is not one of {COMPONENT_STATES}")
        if self.reason not in FINISH_REASONS:
            raise _fail(e, "reason", f"{self.reason!r} is not one of {FINISH_REASONS}")
        put(self, "step", _check_int(e, "step", self.step))
        put(self, "total_steps", _check_int(e, "total_steps", self.total_steps))
        put(self, "group_size", _check_int(e, "group_size", self.group_size, _INT32))
        put(self, "tasks_left", _check_int(e, "tasks_left", self.tasks_left))
        put(self, "created_at", _check_int(e, "created_at", self.created_at))

    @property
    def finished(self) -> bool:
        return self.state == "finished"

    def to_record(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ComponentStatus:
        return cls(**{name: record[name] for name in ComponentStatus.FIELDS})


Event = (
    Task | Experience | WeightVersion | Metric | DeadLetter | SyncRequest | ComponentStatus | Claim
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
)
"""Every event type, each naming its Avro record in `SCHEMA`."""

__all__ = [
    "COMPONENT_STATES",
    "EVENT_TYPES",
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
    "SyncRequest",
    "Task",
    "TopicOffset",
    "TrainedLog",
    "WeightVersion",
    "now_ms",
]
