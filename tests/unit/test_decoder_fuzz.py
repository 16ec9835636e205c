"""Fuzzing the decoders of every event type and the checkpoint manifest parser.

Every schema version in the catalog (each event type, old versions included), through the
single-object codec, its generated fast Experience decoder and the registry framing, and the
manifest's JSON parser, are fed mutated and random bytes. Whatever the input, only the typed
error escapes (DecodeError for events, CheckpointError for manifests), each input is decoded
within a bounded time (the hypothesis deadline, far above a normal decode's milliseconds) and
bounded memory (tracemalloc's peak, checked against a few MiB: a declared length of 2**62 must
not be allocated). Trailing bytes after a complete event are refused on every path: a durable log
keeps every record, so a concatenated or padded record must show up as corrupt, not be silently
read as its first event.
"""

from __future__ import annotations

import contextlib
import json
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rft.errors import CheckpointError, CorruptEventError, DecodeError
from rft.events import fast_experience
from rft.events.catalog import SchemaCatalog
from rft.events.codec import HEADER_SIZE, MAGIC, EventCodec
from rft.events.models import Experience
from rft.events.schema_registry import RegistryCodec, StaticSchemaIds, value_subject
from rft.storage.checkpoint_manifest import CheckpointManifest
from tests.unit.event_strategies import experiences
from tests.unit.golden.make_golden import golden_path

CODEC = EventCodec.default()
CATALOG = SchemaCatalog.default()
VERSIONS = list(CATALOG)
GOLDEN = {
    f"{v.name.rsplit('.', 1)[-1]}.v{v.version}": golden_path(v.name, v.version).read_bytes()
    for v in VERSIONS
}

# Far above a decode's cost (well under a millisecond for these events) even on a loaded 2-core
# machine; what it catches is a decode that loops or allocates its way through a forged length.
DEADLINE_MS = 2000
MEMORY_BOUND = 8 * 1024 * 1024
FUZZ = settings(
    max_examples=300,
    deadline=DEADLINE_MS,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@contextlib.contextmanager
def peak_memory() -> Iterator[list[int]]:
    """Yields a one-item list that holds tracemalloc's peak (bytes) once the block ends."""
    out = [0]
    tracemalloc.start()
    try:
        yield out
        out[0] = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def decodes_or_typed_error(decode: Callable[[bytes], Any], data: bytes) -> None:
    with peak_memory() as peak, contextlib.suppress(DecodeError):
        decode(data)
    assert peak[0] < MEMORY_BOUND + 4 * len(data), f"decode peaked at {peak[0]} bytes"


def varint(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


@st.composite
def mutated(draw: st.DrawFn, base: bytes) -> bytes:
    """`base` with a few edits: bit flips, byte overwrites, inserts (forged huge or negative
    varint lengths among them), deletions, truncation, or appended bytes."""
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "cut", "append"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            chunk = draw(
                st.sampled_from([2**31, 2**40, 2**62, -(2**62), -1, 10**6]).map(varint).filter(bool)
                | st.binary(min_size=1, max_size=8)
            )
            data[at:at] = chunk
        elif kind == "delete" and data:
            del data[at : at + draw(st.integers(1, 8))]
        elif kind == "cut":
            del data[at:]
        else:
            data += draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


# --- every event type and schema version, single-object encoding ---------------------------------


@pytest.mark.parametrize("name", list(GOLDEN))
def test_each_schema_version_decodes_mutations_or_raises_only_decode_errors(name: str) -> None:
    base = GOLDEN[name]

    @FUZZ
    @given(mutated(base))
    def run(data: bytes) -> None:
        decodes_or_typed_error(CODEC.decode, data)

    run()


@FUZZ
@given(st.sampled_from(sorted({g[:HEADER_SIZE] for g in GOLDEN.values()})), st.binary(max_size=256))
def test_random_bodies_behind_every_known_header_raise_only_decode_errors(
    header: bytes, body: bytes
) -> None:
    decodes_or_typed_error(CODEC.decode, header + body)


@FUZZ
@given(st.binary(max_size=64))
def test_random_bytes_raise_only_decode_errors(data: bytes) -> None:
    decodes_or_typed_error(CODEC.decode, data)


@settings(max_examples=150, deadline=DEADLINE_MS, suppress_health_check=[HealthCheck.too_slow])
@given(experiences(), st.data())
def test_mutated_experiences_of_any_shape_raise_only_decode_errors(
    exp: Experience, data: st.DataObject
) -> None:
    decodes_or_typed_error(CODEC.decode, data.draw(mutated(CODEC.encode(exp))))


@pytest.mark.parametrize("name", list(GOLDEN))
@pytest.mark.parametrize("declared", [2**31, 2**40, 2**62])
def test_a_huge_declared_length_at_any_position_allocates_nothing_of_its_size(
    name: str, declared: int
) -> None:
    # overwrite each body byte in turn with a huge varint: whatever field it lands in (string,
    # bytes, array or map block count), the decoder must refuse it without building it
    base = GOLDEN[name]
    forged = varint(declared)
    for at in range(HEADER_SIZE, len(base)):
        decodes_or_typed_error(CODEC.decode, base[:at] + forged + base[at + 1 :])


# --- trailing bytes: refused on every path -------------------------------------------------------


@pytest.mark.parametrize("name", list(GOLDEN))
@given(garbage=st.binary(min_size=1, max_size=32))
@settings(max_examples=25, deadline=DEADLINE_MS)
def test_trailing_bytes_after_a_valid_event_are_corrupt(name: str, garbage: bytes) -> None:
    with pytest.raises(CorruptEventError, match="trailing"):
        CODEC.decode(GOLDEN[name] + garbage)


def test_two_events_concatenated_are_corrupt_not_the_first_event() -> None:
    first, second = GOLDEN["Metric.v2"], GOLDEN["Task.v1"]
    with pytest.raises(CorruptEventError, match=f"{len(second)} trailing bytes"):
        CODEC.decode(first + second)


@settings(max_examples=60, deadline=DEADLINE_MS, suppress_health_check=[HealthCheck.too_slow])
@given(experiences(), st.binary(min_size=1, max_size=16))
def test_the_fast_experience_decoder_refuses_trailing_bytes_itself(
    exp: Experience, garbage: bytes
) -> None:
    latest = CATALOG.latest(Experience.SCHEMA)
    fast = fast_experience.compile_codec(latest.definition, MAGIC + latest.fingerprint)
    data = CODEC.encode(exp)
    assert fast.decode(data, HEADER_SIZE) is not None  # the fast path reads it whole
    with pytest.raises(fast_experience.Malformed, match="trailing"):
        fast.decode(data + garbage, HEADER_SIZE)
    with pytest.raises(CorruptEventError, match="trailing"):  # and the codec says so
        CODEC.decode(data + garbage)


# --- the registry framing (same bodies, a 5-byte schema id header) -------------------------------

REGISTRY_IDS = {v.fingerprint: 100 + i for i, v in enumerate(VERSIONS)}
REGISTRY = RegistryCodec(
    StaticSchemaIds(
        {(value_subject("t"), v.fingerprint): REGISTRY_IDS[v.fingerprint] for v in VERSIONS},
        {REGISTRY_IDS[v.fingerprint]: v.definition for v in VERSIONS},
    )
)


@FUZZ
@given(st.sampled_from(list(GOLDEN.values())), st.data())
def test_registry_framed_mutations_raise_only_decode_errors(
    golden: bytes, data: st.DataObject
) -> None:
    version = CATALOG.by_fingerprint(golden[2:HEADER_SIZE])
    assert version is not None
    framed = b"\x00" + REGISTRY_IDS[version.fingerprint].to_bytes(4, "big") + golden[HEADER_SIZE:]
    REGISTRY.decode(framed)  # the unmutated frame is an event
    decodes_or_typed_error(REGISTRY.decode, data.draw(mutated(framed)))


# --- the checkpoint manifest parser --------------------------------------------------------------

VALID_MANIFEST = CheckpointManifest.from_dict(
    {
        "format": 1,
        "version": 3,
        "train_step": 30,
        "created_at": 1_700_000_000_000,
        "files": [{"name": "model.safetensors", "size": 1234, "sha256": "ab" * 32}],
        "consumed_offsets": [{"topic": "p.n.experiences", "partition": 0, "offset": 17}],
        "parent_version": 2,
        "extra": {"dtype": "bfloat16"},
    }
).to_json()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def parses_or_checkpoint_error(data: bytes | str) -> None:
    with peak_memory() as peak, contextlib.suppress(CheckpointError):
        CheckpointManifest.from_json(data, source="s3://b/p/n/v3/manifest.json")
    assert peak[0] < MEMORY_BOUND + 8 * len(data), f"parse peaked at {peak[0]} bytes"


@FUZZ
@given(mutated(VALID_MANIFEST))
def test_mutated_manifest_bytes_raise_only_checkpoint_errors(data: bytes) -> None:
    parses_or_checkpoint_error(data)


@FUZZ
@given(st.data())
def test_manifest_fields_replaced_by_any_json_raise_only_checkpoint_errors(
    data: st.DataObject,
) -> None:
    raw = json.loads(VALID_MANIFEST)
    for _ in range(data.draw(st.integers(1, 3))):
        target = raw
        path = data.draw(
            st.sampled_from(
                [
                    "format",
                    "version",
                    "train_step",
                    "created_at",
                    "files",
                    "consumed_offsets",
                    "parent_version",
                    "extra",
                    "files.0",
                    "files.0.name",
                    "files.0.size",
                    "files.0.sha256",
                    "consumed_offsets.0.offset",
                    "consumed_offsets.0.topic",
                ]
            )
        )
        *parents, leaf = path.split(".")
        try:
            for part in parents:
                target = target[int(part)] if part.isdigit() else target[part]
            key: Any = int(leaf) if leaf.isdigit() else leaf
            if data.draw(st.booleans()) and isinstance(target, dict):
                target.pop(key, None)
            else:
                target[key] = data.draw(json_values)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier edit already replaced the parent
    parses_or_checkpoint_error(json.dumps(raw))


@FUZZ
@given(json_values)
def test_any_json_document_raises_only_checkpoint_errors(doc: Any) -> None:
    parses_or_checkpoint_error(json.dumps(doc))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"format": 1, "version": 1' + b"0" * 5000 + b"}", "unreadable number"),
        (b"[" * 100_000, "nests too deeply"),
        (b"\xff\xfe{", "not valid JSON"),
        (VALID_MANIFEST.replace(b'"version": 3', b'"version": 1e999'), "'version' must be"),
    ],
    ids=["5000-digit-int", "deep-nesting", "not-utf8", "inf-version"],
)
def test_manifest_inputs_that_broke_the_json_parser_are_checkpoint_errors(
    data: bytes, message: str
) -> None:
    with pytest.raises(CheckpointError, match=message) as caught:
        CheckpointManifest.from_json(data, source="s3://b/p/n/v3/manifest.json")
    assert "s3://b/p/n/v3/manifest.json" in str(caught.value)
