"""EventCodec: round trips, schema evolution, golden bytes and typed failures on bad bytes."""

from __future__ import annotations

import contextlib
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rft.errors import (
    CorruptEventError,
    DecodeError,
    EncodeError,
    TruncatedEventError,
    UnknownSchemaError,
)
from rft.events.catalog import SchemaCatalog
from rft.events.codec import MAGIC, EventCodec
from rft.events.models import (
    COMPONENT_STATES,
    FINISH_REASONS,
    Claim,
    ComponentStatus,
    DeadLetter,
    Experience,
    InvalidEventError,
    ManifestEntry,
    Metric,
    OffsetRanges,
    RetrainedOffset,
    SyncRequest,
    Task,
    TopicOffset,
    TrainedLog,
    WeightVersion,
)
from tests.unit.event_strategies import experiences, floats, i32, i64, text
from tests.unit.golden.make_golden import SAMPLES, golden_codec, golden_path

CODEC = EventCodec.default()
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# strict JSON has no inf (Task refuses it, and a test below checks that): finite floats only
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
    | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)


tasks = st.builds(
    Task,
    task_id=text,
    taskset=text,
    epoch=i32,
    index=i64,
    payload=st.dictionaries(text, json_values, max_size=5),
    format=st.dictionaries(text, text, max_size=3),
    workflow=text,
    reward_fn=text,
    rollout_args=st.dictionaries(text, json_values, max_size=3),
    repeat_times=st.integers(1, 2**31 - 1),
    is_eval=st.booleans(),
    created_at=i64,
)
offset_ranges = st.lists(
    st.builds(
        OffsetRanges,
        topic=text,
        partition=i32,
        ranges=st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**20)), max_size=4).map(
            lambda runs: tuple((a, a + n) for a, n in runs)
        ),
    ),
    max_size=3,
).map(tuple)
trained_logs = st.builds(
    TrainedLog,
    trained=offset_ranges,
    retrained=st.lists(
        st.builds(
            RetrainedOffset, topic=text, partition=i32, offset=i64, times=st.integers(2, 2**31 - 1)
        ),
        max_size=3,
    ).map(tuple),
    settled=offset_ranges,
    settled_ahead=offset_ranges,
)
weight_versions = st.builds(
    WeightVersion,
    version=i64,
    train_step=i64,
    uri=text,
    manifest=st.lists(
        st.builds(ManifestEntry, name=text, size=st.integers(0, 2**63 - 1), sha256=text),
        max_size=5,
    ).map(tuple),
    consumed_offsets=st.lists(
        st.builds(TopicOffset, topic=text, partition=i32, offset=i64), max_size=5
    ).map(tuple),
    parent_version=st.none() | i64,
    created_at=i64,
    trained_log=st.none() | trained_logs,
)
metrics = st.builds(
    Metric,
    component=text,
    run=text,
    step=i64,
    values=st.dictionaries(text, floats, max_size=6),
    tags=st.dictionaries(text, text, max_size=3),
    timestamp=i64,
)
dead_letters = st.builds(
    DeadLetter,
    source_topic=text,
    source_partition=i32,
    source_offset=i64,
    payload=st.binary(max_size=200),
    error_class=text,
    error_message=text,
    consumer=text,
    source_key=st.none() | st.binary(max_size=20),
    headers=st.dictionaries(text, st.binary(max_size=20), max_size=3),
    created_at=i64,
)
sync_requests = st.builds(
    SyncRequest, explorer_id=text, current_version=i64, step=i64, requested_at=i64
)
component_statuses = st.builds(
    ComponentStatus,
    component=text,
    instance=text,
    group=text,
    state=st.sampled_from(COMPONENT_STATES),
    reason=st.sampled_from(FINISH_REASONS),
    detail=text,
    step=i64,
    total_steps=i64,
    experience_topic=text,
    group_size=i32,
    tasks_left=i64,
    created_at=i64,
)
claims = st.builds(Claim, holder=text, token=text, host=text, pid=i64, claimed_at=i64)
any_event = (
    experiences()
    | tasks
    | weight_versions
    | metrics
    | dead_letters
    | sync_requests
    | component_statuses
    | claims
)


@FAST
@given(any_event)
def test_every_event_round_trips(event: object) -> None:
    data = CODEC.encode(event)  # type: ignore[arg-type]
    assert data[:2] == MAGIC
    assert data[2:10] == CODEC.schema_for(type(event)).fingerprint
    decoded = CODEC.decode(data)
    assert type(decoded) is type(event)
    assert decoded == event
    assert CODEC.encode(decoded) == data


def test_large_experience_round_trips_zero_copy_readonly() -> None:
    n = 32_768
    event = Experience(
        "e", "t", "g", 1, "x", 0, np.arange(n), np.arange(n), np.zeros(n, dtype=np.float32)
    )
    decoded = CODEC.decode(CODEC.encode(event))
    assert decoded == event
    assert decoded.total_tokens == 2 * n
    assert decoded.response_ids.dtype == np.dtype("<i4")
    assert not decoded.response_ids.flags.writeable


# --- evolution ---------------------------------------------------------------------------------

OLD_EXPERIENCE = EventCodec(
    SchemaCatalog.default(), write_versions={"Experience": 1}, read_versions={"Experience": 1}
)
V2_EXPERIENCE = EventCodec(
    SchemaCatalog.default(), write_versions={"Experience": 2}, read_versions={"Experience": 2}
)
V3_EXPERIENCE = EventCodec(
    SchemaCatalog.default(), write_versions={"Experience": 3}, read_versions={"Experience": 3}
)
OLD_METRIC = EventCodec(
    SchemaCatalog.default(), write_versions={"Metric": 1}, read_versions={"Metric": 1}
)
OLD_WEIGHTS = EventCodec(
    SchemaCatalog.default(),
    write_versions={"WeightVersion": 1},
    read_versions={"WeightVersion": 1},
)


@FAST
@given(weight_versions)
def test_weight_version_evolves_both_ways(event: WeightVersion) -> None:
    # v1 events carry no trained log and read as None; a v1 reader of a v2 event sees the rest
    old = CODEC.decode(OLD_WEIGHTS.encode(event))
    assert old.trained_log is None and old.consumed_offsets == event.consumed_offsets
    old_view = OLD_WEIGHTS.decode(CODEC.encode(event))
    assert old_view.trained_log is None and old_view.manifest == event.manifest


@FAST
@given(experiences())
def test_experience_v1_bytes_read_as_latest_with_defaults(event: Experience) -> None:
    data = OLD_EXPERIENCE.encode(event)
    assert data[2:10] == SchemaCatalog.default().get("Experience", 1).fingerprint
    decoded = CODEC.decode(data)
    assert decoded.truncated is False
    assert decoded.metrics == {}
    # what every trainer before v3 recomputed at, and no group
    assert decoded.logprob_temperature == 1.0 and decoded.explorer_group == ""
    assert decoded.response_ids.tobytes() == event.response_ids.tobytes()
    assert decoded.info == event.info


@FAST
@given(experiences())
def test_experience_v2_bytes_read_as_latest_with_v3_defaults(event: Experience) -> None:
    data = V2_EXPERIENCE.encode(event)
    assert data[2:10] == SchemaCatalog.default().get("Experience", 2).fingerprint
    decoded = CODEC.decode(data)
    assert decoded.logprob_temperature == 1.0 and decoded.explorer_group == ""
    assert decoded.truncated == event.truncated
    assert decoded.logprobs.tobytes() == event.logprobs.tobytes()


@FAST
@given(experiences())
def test_experience_v3_bytes_read_as_whole_trajectories(event: Experience) -> None:
    data = V3_EXPERIENCE.encode(event)
    assert data[2:10] == SchemaCatalog.default().get("Experience", 3).fingerprint
    decoded = CODEC.decode(data)
    assert decoded.logprob_temperature == event.logprob_temperature
    assert decoded.explorer_group == event.explorer_group
    # before v4 every experience was a whole trajectory: its own, one turn
    assert (decoded.trajectory_id, decoded.turn, decoded.turn_count) == ("", 0, 1)
    assert decoded.trajectory == decoded.experience_id


@FAST
@given(experiences())
def test_experience_v4_round_trip_keeps_trajectory_and_turn(event: Experience) -> None:
    data = CODEC.encode(event)
    assert data[2:10] == SchemaCatalog.default().get("Experience", 4).fingerprint
    decoded = CODEC.decode(data)
    assert decoded == event
    assert decoded.logprob_temperature == event.logprob_temperature
    assert decoded.explorer_group == event.explorer_group
    assert (decoded.trajectory_id, decoded.turn, decoded.turn_count) == (
        event.trajectory_id,
        event.turn,
        event.turn_count,
    )


@FAST
@given(experiences())
def test_experience_v2_bytes_read_by_a_v1_reader(event: Experience) -> None:
    data = CODEC.encode(event)
    decoded = OLD_EXPERIENCE.decode(data)
    assert isinstance(decoded, Experience)
    # the v1 reader never sees the v2 and v3 fields; the model fills its own defaults
    assert decoded.truncated is False and decoded.metrics == {}
    assert decoded.logprob_temperature == 1.0 and decoded.explorer_group == ""
    assert decoded.logprobs.tobytes() == event.logprobs.tobytes()
    assert decoded.reward == event.reward


OLD_TASK = EventCodec(
    SchemaCatalog.default(), write_versions={"Task": 1}, read_versions={"Task": 1}
)


@FAST
@given(st.integers(0, 2**31 - 1), st.integers(0, 2**40), st.integers(0, 2**62))
def test_task_position_evolves_both_ways(epoch: int, index: int, position: int) -> None:
    task = Task("t", "s", epoch, index, {"q": 1}, position=position)
    assert CODEC.decode(CODEC.encode(task)) == task
    old = CODEC.decode(OLD_TASK.encode(task))  # written before v2: no position
    assert old.position is None and old.index == index
    # ordered by (epoch, index) instead: file order within the epoch
    assert old.published_order == (epoch, index) and task.published_order == (epoch, position)
    assert OLD_TASK.decode(CODEC.encode(task)).position is None  # a v1 reader drops it


def test_golden_task_v1_has_no_position_and_v2_keeps_it() -> None:
    assert CODEC.decode(golden_path("rft.events.Task", 1).read_bytes()).position is None
    assert CODEC.decode(golden_path("rft.events.Task", 2).read_bytes()).position == 3


@FAST
@given(metrics)
def test_metric_evolves_both_ways(event: Metric) -> None:
    assert CODEC.decode(OLD_METRIC.encode(event)).tags == {}
    old_view = OLD_METRIC.decode(CODEC.encode(event))
    assert old_view.values == event.values and old_view.tags == {}


# --- golden bytes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schema", list(SchemaCatalog.default()), ids=lambda s: f"{s.name}.v{s.version}"
)
def test_golden_bytes_decode_and_reencode_identically(schema) -> None:  # type: ignore[no-untyped-def]
    path = golden_path(schema.name, schema.version)
    data = path.read_bytes()
    assert data[2:10] == schema.fingerprint
    decoded = CODEC.decode(data)
    sample = SAMPLES[schema.name]
    added = {f["name"] for f in SchemaCatalog.default().latest(schema.name).definition["fields"]}
    added -= {f["name"] for f in schema.definition["fields"]}
    for name in type(sample).__dataclass_fields__:
        if name in added or name == "SCHEMA":
            continue
        mine, theirs = getattr(decoded, name), getattr(sample, name)
        if isinstance(mine, np.ndarray):
            assert mine.tobytes() == theirs.tobytes(), name
        else:
            assert mine == theirs, name
    assert golden_codec(schema.name, schema.version).encode(decoded) == data


def test_golden_experience_fields() -> None:
    v4 = CODEC.decode(golden_path("rft.events.Experience", 4).read_bytes())
    assert (v4.trajectory_id, v4.turn, v4.turn_count) == ("arith-0-17/3", 1, 3)
    v3 = CODEC.decode(golden_path("rft.events.Experience", 3).read_bytes())
    assert (v3.trajectory_id, v3.turn, v3.turn_count) == ("", 0, 1)
    assert v3.logprob_temperature == 0.7
    assert v3.explorer_group == "demo.run1.explorer.explorer"
    decoded = CODEC.decode(golden_path("rft.events.Experience", 2).read_bytes())
    assert decoded.prompt_ids.tolist() == [1, 2040, 33, -1, 2**31 - 1]
    assert decoded.action_mask.tolist() == [True, True, False]
    assert decoded.truncated is True and decoded.metrics["generate_s"] == 0.125
    assert decoded.response_text == "42 ✓"
    v1 = CODEC.decode(golden_path("rft.events.Experience", 1).read_bytes())
    assert v1.truncated is False and v1.metrics == {} and v1.reward == 1.0
    # events written before v3 were trained at temperature 1.0, so that is what they read as
    for old in (v1, decoded):
        assert old.logprob_temperature == 1.0 and old.explorer_group == ""


def test_golden_weight_version_trained_log() -> None:
    v1 = CODEC.decode(golden_path("rft.events.WeightVersion", 1).read_bytes())
    assert v1.trained_log is None and v1.parent_version == 4
    v2 = CODEC.decode(golden_path("rft.events.WeightVersion", 2).read_bytes())
    log = v2.trained_log
    assert log is not None
    assert [list(r.offsets()) for r in log.trained] == [[*range(1100, 1164), *range(1180, 1200)]]
    assert log.retrained == (RetrainedOffset("demo.run1.experiences", 0, 1101, 2),)
    assert log.settled_ahead[0].ranges == ((1210, 1211),)


def test_trained_log_refuses_a_backward_run() -> None:
    with pytest.raises(InvalidEventError, match=r"OffsetRanges.ranges\[0\]"):
        OffsetRanges("t", 0, ((5, 4),))


# --- bad bytes ---------------------------------------------------------------------------------

GOLDEN = [golden_path(s.name, s.version).read_bytes() for s in SchemaCatalog.default()]


@pytest.mark.parametrize("data", GOLDEN, ids=lambda d: d[2:10].hex())
def test_every_truncation_is_a_truncated_event_error(data: bytes) -> None:
    for cut in range(len(data)):
        with pytest.raises(TruncatedEventError):
            CODEC.decode(data[:cut])


def test_empty_and_short_inputs() -> None:
    with pytest.raises(TruncatedEventError, match="header"):
        CODEC.decode(b"")
    with pytest.raises(CorruptEventError, match="bad magic"):
        CODEC.decode(b"\x00\x01" + b"\x00" * 20)
    with pytest.raises(CorruptEventError, match="bad magic"):
        CODEC.decode(b"{}")


def test_unknown_fingerprint_names_it() -> None:
    data = MAGIC + bytes.fromhex("0123456789abcdef") + GOLDEN[0][10:]
    with pytest.raises(UnknownSchemaError, match="0123456789abcdef"):
        CODEC.decode(data)


@pytest.mark.parametrize("data", GOLDEN, ids=lambda d: d[2:10].hex())
def test_trailing_garbage_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptEventError, match="trailing"):
        CODEC.decode(data + b"\x00")


def _zigzag_varint(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


@pytest.mark.parametrize("declared", [2**40, 2**62, -5])
def test_huge_or_negative_declared_length_is_corrupt_without_allocating(declared: int) -> None:
    # SyncRequest body starts with the explorer_id string length
    data = CODEC.encode(SyncRequest("explorer-0", 1, 2, 3))
    forged = data[:10] + _zigzag_varint(declared) + b"explorer-0" + data[21:]
    tracemalloc.start()
    try:
        with pytest.raises(CorruptEventError):
            CODEC.decode(forged)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


def test_huge_block_count_is_corrupt() -> None:
    event = WeightVersion(1, 1, "s3://b/x/", created_at=0)
    data = CODEC.encode(event)
    # body: version, train_step, uri, then the manifest block count (0 here)
    prefix = 10 + 1 + 1 + 1 + len("s3://b/x/")
    assert data[prefix] == 0
    forged = data[:prefix] + _zigzag_varint(2**50) + data[prefix + 1 :]
    with pytest.raises(CorruptEventError, match="manifest"):
        CODEC.decode(forged)


def test_body_that_breaks_the_model_is_corrupt_naming_the_field() -> None:
    event = SAMPLES["rft.events.Experience"]
    data = bytearray(CODEC.encode(event))
    mask_at = bytes(data).index(b"\x06\x01\x01\x00")  # length 3, then the mask bytes
    data[mask_at + 1] = 7
    with pytest.raises(CorruptEventError, match="action_mask"):
        CODEC.decode(bytes(data))


@pytest.mark.parametrize("temperature", [0.0, -0.7, float("inf"), float("nan")])
def test_unusable_logprob_temperature_on_the_wire_is_corrupt(temperature: float) -> None:
    event = SAMPLES["rft.events.Experience"]
    data = CODEC.encode(event)
    good = np.float64(event.logprob_temperature).tobytes()
    assert data.count(good) == 1
    forged = data.replace(good, np.float64(temperature).tobytes())
    with pytest.raises(CorruptEventError, match="logprob_temperature"):
        CODEC.decode(forged)


def test_non_utf8_string_is_corrupt() -> None:
    data = bytearray(CODEC.encode(SyncRequest("abc", 1, 2, 3)))
    data[11] = 0xFF
    with pytest.raises(CorruptEventError, match="UTF-8"):
        CODEC.decode(bytes(data))


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(range(len(GOLDEN))),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), min_size=1, max_size=4),
)
def test_bit_flips_raise_decode_error_or_decode(which: int, flips: list[tuple[int, int]]) -> None:
    data = bytearray(GOLDEN[which])
    for position, bit in flips:
        data[position % len(data)] ^= 1 << bit
    with contextlib.suppress(DecodeError):
        CODEC.decode(bytes(data))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_random_bodies_after_a_valid_header_only_raise_decode_errors(body: bytes) -> None:
    for header in {g[:10] for g in GOLDEN}:
        with contextlib.suppress(DecodeError):
            CODEC.decode(header + body)


def test_decode_rejects_non_bytes() -> None:
    with pytest.raises(CorruptEventError):
        CODEC.decode("c301")  # type: ignore[arg-type]


# --- encode errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: SyncRequest("e", "1", 2, 3), "current_version"),  # type: ignore[arg-type]
        (lambda: SyncRequest("e", 1.5, 2, 3), "current_version"),  # type: ignore[arg-type]
        (lambda: SyncRequest(7, 1, 2, 3), "explorer_id"),  # type: ignore[arg-type]
        (lambda: Metric("c", "r", 1, {"loss": "high"}), "values"),  # type: ignore[dict-item]
        (lambda: Metric("c", "r", 1, {}, tags={"a": 1}), "tags"),  # type: ignore[dict-item]
        (lambda: Task("t", "s", 0, True, {}), "index"),
        (lambda: Task("t", "s", 2**31, 0, {}), "epoch"),
        (lambda: Task("t", "s", 0, 0, {}, repeat_times=0), "repeat_times"),
        (lambda: Task("t", "s", 0, 0, {}, position=-1), "position"),
        (lambda: Task("t", "s", 0, 0, {}, position=1.5), "position"),  # type: ignore[arg-type]
        (lambda: Task("t", "s", 0, 0, {}, is_eval="yes"), "is_eval"),  # type: ignore[arg-type]
        (lambda: Experience("e", "t", "g", 1, "x", 0, [], [1, 2], [0.0]), "logprobs"),
        (lambda: Experience("e", "t", "g", 1, "x", 0, [], [1], [0.0], [1, 1]), "action_mask"),
        (lambda: Experience("e", "t", "g", 1, "x", 0, [], [1], [0.0], [2]), "action_mask"),
        (lambda: Experience("e", "t", "g", 1, "x", 0, [2**40], [], []), "prompt_ids"),
        (lambda: Experience("e", "t", "g", 1, "x", 0, [0.5], [], []), "prompt_ids"),
        (lambda: Experience("e", "t", "g", 1, "x", 0, [], [1], [0.0], reward="1"), "reward"),
        (
            lambda: Experience("e", "t", "g", 1, "x", 0, [], [], [], logprob_temperature=0.0),
            "logprob_t",
        ),
        (
            lambda: Experience("e", "t", "g", 1, "x", 0, [], [], [], logprob_temperature=-1),
            "logprob_t",
        ),
        (
            lambda: Experience("e", "t", "g", 1, "x", 0, [], [], [], logprob_temperature=np.inf),
            "logprob_temperature",
        ),
        (
            lambda: Experience("e", "t", "g", 1, "x", 0, [], [], [], logprob_temperature=np.nan),
            "logprob_temperature",
        ),
        (
            lambda: Experience("e", "t", "g", 1, "x", 0, [], [], [], logprob_temperature="1"),
            "logprob_temperature",
        ),
        (
            lambda: Experience("e", "t", "g", 1, "x", 0, [], [], [], explorer_group=3),
            "explorer_group",
        ),
        (lambda: WeightVersion(1, 1, "u", manifest=("a",)), "manifest[0]"),  # type: ignore[arg-type]
    ],
)
def test_wrong_typed_fields_raise_encode_error_naming_the_field(build, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(EncodeError, match=rf"\.{__import__('re').escape(field)}"):
        build()


def test_non_json_payload_is_an_encode_error_at_encode_time() -> None:
    for bad in (float("nan"), float("inf")):
        with pytest.raises(EncodeError, match=r"Task\.payload"):
            CODEC.encode(Task("t", "s", 0, 0, {"x": bad}))
    with pytest.raises(InvalidEventError, match=r"Task\.rollout_args"):
        CODEC.encode(Task("t", "s", 0, 0, {}, rollout_args={"f": object()}))


def test_lists_are_accepted_and_converted() -> None:
    event = Experience("e", "t", "g", 1, "x", 0, [1, 2], [3], [-0.5], [1], token_rewards=[1])
    assert event.prompt_ids.dtype == np.int32 and event.action_mask.dtype == np.bool_
    assert event.total_tokens == 3 and event.action_count == 1
    assert event.token_ids().tolist() == [1, 2, 3]
    assert CODEC.decode(CODEC.encode(event)) == event


def test_dead_letter_for_error_keeps_origin() -> None:
    error = CorruptEventError("bad magic")
    letter = DeadLetter.for_error(
        error,
        topic="p.n.experiences",
        partition=1,
        offset=5,
        payload=b"\x00",
        consumer="trainer",
        key=b"k",
        headers=[("traceparent", b"00-ab"), ("empty", None)],
    )
    assert letter.error_class == "rft.errors.CorruptEventError"
    assert letter.headers == {"traceparent": b"00-ab", "empty": b""}
    assert CODEC.decode(CODEC.encode(letter)) == letter
