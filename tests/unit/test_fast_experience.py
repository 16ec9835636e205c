"""Generated Experience codec: byte-identical to fastavro, and fastavro still owns every failure."""

from __future__ import annotations

import dataclasses
from io import BytesIO
from typing import Any

import fastavro
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rft.errors import DecodeError, EncodeError
from rft.events import fast_experience
from rft.events.codec import HEADER_SIZE, MAGIC, EventCodec, ReadPlan
from rft.events.models import Experience
from tests.unit.event_strategies import experiences
from tests.unit.golden.make_golden import SAMPLES, golden_path

CODEC = EventCodec.default()
LATEST = CODEC.catalog.latest(Experience.SCHEMA)
PLAN = CODEC.read_plan(LATEST)
REFERENCE_PLAN = dataclasses.replace(PLAN, fast_decode=None)
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fastavro_encode(record: dict[str, Any]) -> bytes:
    buffer = BytesIO()
    buffer.write(MAGIC + LATEST.fingerprint)
    fastavro.schemaless_writer(buffer, LATEST.parsed, record)
    return buffer.getvalue()


def fastavro_record(data: bytes) -> dict[str, Any]:
    buffer = BytesIO(data)
    buffer.seek(HEADER_SIZE)
    return fastavro.schemaless_reader(buffer, LATEST.parsed, None)  # type: ignore[return-value]


def reference_decode(data: bytes) -> Experience | DecodeError:
    """What the codec returned or raised before the generated decoder existed."""
    try:
        return CODEC.decode_body(REFERENCE_PLAN, data, HEADER_SIZE)  # type: ignore[return-value]
    except DecodeError as exc:
        return exc


def outcome(data: bytes) -> Experience | DecodeError:
    try:
        return CODEC.decode(data)  # type: ignore[return-value]
    except DecodeError as exc:
        return exc


def same_outcome(got: Experience | DecodeError, want: Experience | DecodeError) -> bool:
    if isinstance(want, DecodeError):
        return type(got) is type(want) and str(got) == str(want)
    if isinstance(got, DecodeError):
        return False
    # a flipped bit can decode to a NaN (NaN != NaN): equal events encode to equal bytes
    return got == want or CODEC.encode(got) == CODEC.encode(want)


def test_latest_experience_schema_takes_the_fast_path() -> None:
    # a schema change the generator cannot handle would silently make every event slower
    assert CODEC._plan_for(Experience).fast_encode is not None
    assert PLAN.fast_decode is not None


def test_older_and_pinned_versions_keep_the_fastavro_path() -> None:
    v1 = CODEC.catalog.get(Experience.SCHEMA, 1)
    assert CODEC.read_plan(v1).fast_decode is None
    pinned_writer = EventCodec(CODEC.catalog, write_versions={"Experience": 1})
    assert pinned_writer._plan_for(Experience).fast_encode is None
    old_reader = EventCodec(CODEC.catalog, read_versions={"Experience": 1})
    assert old_reader.read_plan(LATEST).fast_decode is None


def test_golden_bytes() -> None:
    golden = golden_path(LATEST.name, LATEST.version).read_bytes()
    assert CODEC.encode(SAMPLES[LATEST.name]) == golden
    assert PLAN.fast_decode is not None
    assert PLAN.fast_decode(golden, HEADER_SIZE) == fastavro_record(golden)


@PROPS
@given(experiences())
def test_encode_is_byte_identical_to_fastavro(event: Experience) -> None:
    data = CODEC.encode(event)
    assert data == fastavro_encode(event.to_record())
    assert PLAN.fast_decode is not None
    record = PLAN.fast_decode(data, HEADER_SIZE)
    reference = fastavro_record(data)
    assert record.keys() == reference.keys()
    for name, value in reference.items():
        if isinstance(value, float):  # NaN != NaN: compare the bits
            assert np.float64(record[name]).tobytes() == np.float64(value).tobytes()
        elif name == "metrics":
            assert (
                np.array(list(record[name].values())).tobytes()
                == np.array(list(value.values())).tobytes()
            )
            assert list(record[name]) == list(value)
        else:
            assert record[name] == value, name
    assert CODEC.decode(data) == event


@PROPS
@given(experiences(), st.data())
def test_malformed_bytes_fail_exactly_as_before(event: Experience, data: st.DataObject) -> None:
    good = CODEC.encode(event)
    cut = data.draw(st.integers(HEADER_SIZE, len(good)))
    for bad in (good[:cut], good + b"\x00"):
        assert same_outcome(outcome(bad), reference_decode(bad))
    at = data.draw(st.integers(HEADER_SIZE, len(good) - 1))
    flipped = bytearray(good)
    flipped[at] = data.draw(st.integers(0, 255))
    assert same_outcome(outcome(bytes(flipped)), reference_decode(bytes(flipped)))


@pytest.mark.parametrize(
    "body_patch",
    [
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # varint longer than 10 bytes
        b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x7f",  # 10-byte varint with bits past 64
        b"\x01",  # negative length
        b"\xfe\xff\xff\xff\x0f",  # a length far past the end of the event
    ],
)
def test_bad_lengths_fail_exactly_as_before(body_patch: bytes) -> None:
    good = CODEC.encode(SAMPLES[LATEST.name])
    bad = good[:HEADER_SIZE] + body_patch + good[HEADER_SIZE + 1 :]
    got, want = outcome(bad), reference_decode(bad)
    assert isinstance(want, DecodeError)
    assert same_outcome(got, want)


def test_negative_map_block_counts_decode_like_fastavro() -> None:
    # fastavro never writes them, other Avro writers may: count -1, then the block's byte size
    event = dataclasses.replace(SAMPLES[LATEST.name], info={"key-xyz": "value-xyz"})
    data = CODEC.encode(event)
    entry = b"\x0ekey-xyz\x12value-xyz"
    assert data.count(b"\x02" + entry + b"\x00") == 1
    blocked = data.replace(b"\x02" + entry, b"\x01" + bytes([len(entry) << 1]) + entry)
    assert CODEC.decode(blocked) == event
    assert PLAN.fast_decode is not None
    assert PLAN.fast_decode(blocked, HEADER_SIZE) == fastavro_record(blocked)


def test_values_the_generated_encoder_refuses_still_encode_or_fail_as_before() -> None:
    sample = SAMPLES[LATEST.name]
    surrogate = dataclasses.replace(sample, response_text="\ud800")
    with pytest.raises(EncodeError):
        CODEC.encode(surrogate)
    broken = dataclasses.replace(sample)
    object.__setattr__(broken, "group_size", "eight")  # bypasses the model's checks
    with pytest.raises(EncodeError, match="group_size"):
        CODEC.encode(broken)
    numpy_int = dataclasses.replace(sample)
    object.__setattr__(numpy_int, "model_version", np.int64(5))
    assert CODEC.encode(numpy_int) == fastavro_encode(numpy_int.to_record())


def test_unsupported_schema_shapes_are_refused() -> None:
    nested = {
        "type": "record",
        "name": "Outer",
        "fields": [
            {"name": "inner", "type": {"type": "record", "name": "In", "fields": []}},
        ],
    }
    union = {"type": "record", "name": "U", "fields": [{"name": "u", "type": ["int", "string"]}]}
    for schema in (nested, union):
        with pytest.raises(fast_experience.UnsupportedSchemaError):
            fast_experience.compile_codec(schema, b"")


def test_read_plan_type_is_unchanged_for_other_framings() -> None:
    # the schema-registry framing decodes through decode_body with a 5-byte prefix
    data = CODEC.encode(SAMPLES[LATEST.name])
    framed = b"\x00\x00\x00\x00\x07" + data[HEADER_SIZE:]
    assert isinstance(PLAN, ReadPlan)
    assert CODEC.decode_body(PLAN, framed, 5) == SAMPLES[LATEST.name]


def test_nan_doubles_keep_their_bits() -> None:
    nan = np.frombuffer(b"\x01\x00\x00\x00\x00\x00\xf8\x7f", dtype="<f8")[0].item()
    event = dataclasses.replace(SAMPLES[LATEST.name], reward=nan, metrics={"m": nan})
    data = CODEC.encode(event)
    assert data == fastavro_encode(event.to_record())
    decoded = CODEC.decode(data)
    assert isinstance(decoded, Experience)
    assert np.float64(decoded.reward).tobytes() == np.float64(nan).tobytes()
    assert np.float64(decoded.metrics["m"]).tobytes() == np.float64(nan).tobytes()
