"""Confluent framing of events: header layout, id caching and decoding by schema id."""

from __future__ import annotations

import pytest

from rft.errors import CorruptEventError, TransportError, TruncatedEventError, UnknownSchemaError
from rft.events.catalog import SchemaCatalog
from rft.events.codec import EventCodec
from rft.events.schema_registry import (
    HttpSchemaRegistry,
    RegistryCodec,
    StaticSchemaIds,
    value_subject,
)
from tests.unit.golden.make_golden import SAMPLES

CATALOG = SchemaCatalog.default()


class CountingIds(StaticSchemaIds):
    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.lookups = 0

    def id_for(self, subject, schema):  # type: ignore[no-untyped-def]
        self.lookups += 1
        return super().id_for(subject, schema)


def _ids() -> CountingIds:
    ids, schemas = {}, {}
    for number, schema in enumerate(CATALOG, start=100):
        ids[(value_subject("p.n.events"), schema.fingerprint)] = number
        schemas[number] = schema.definition
    return CountingIds(ids, schemas)


def test_frames_with_big_endian_id_and_round_trips_every_event() -> None:
    ids = _ids()
    codec = RegistryCodec(ids)
    for name, event in SAMPLES.items():
        data = codec.encode("p.n.events", event)
        expected_id = ids.id_for(value_subject("p.n.events"), CATALOG.latest(name))
        assert data[0] == 0 and int.from_bytes(data[1:5], "big") == expected_id
        assert data[5:] == EventCodec.default().encode(event)[10:]
        assert codec.decode(data) == event


def test_ids_are_cached_per_subject_and_schema() -> None:
    ids = _ids()
    codec = RegistryCodec(ids)
    for _ in range(3):
        codec.encode("p.n.events", SAMPLES["rft.events.Metric"])
    assert ids.lookups == 1


def test_old_writer_version_resolves_to_latest() -> None:
    ids = _ids()
    old = RegistryCodec(ids, EventCodec(CATALOG, write_versions={"Experience": 1}))
    decoded = RegistryCodec(ids).decode(old.encode("p.n.events", SAMPLES["rft.events.Experience"]))
    assert decoded.truncated is False and decoded.metrics == {}


def test_bad_frames_raise_typed_errors() -> None:
    codec = RegistryCodec(_ids())
    good = codec.encode("p.n.events", SAMPLES["rft.events.SyncRequest"])
    with pytest.raises(TruncatedEventError):
        codec.decode(good[:3])
    with pytest.raises(TruncatedEventError):
        codec.decode(good[:-1])
    with pytest.raises(CorruptEventError, match="magic"):
        codec.decode(b"\x01" + good[1:])
    with pytest.raises(UnknownSchemaError, match="999"):
        codec.decode(b"\x00" + (999).to_bytes(4, "big") + good[5:])
    with pytest.raises(UnknownSchemaError):
        codec.encode("other-topic", SAMPLES["rft.events.SyncRequest"])


def test_schema_the_catalog_does_not_know_is_unknown() -> None:
    foreign = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}
    codec = RegistryCodec(StaticSchemaIds({}, {7: foreign}))
    with pytest.raises(UnknownSchemaError, match="not in the catalog"):
        codec.decode(b"\x00\x00\x00\x00\x07\x02")


def test_unreachable_registry_is_a_transport_error() -> None:
    registry = HttpSchemaRegistry("http://127.0.0.1:9", timeout_s=2)
    with pytest.raises(TransportError, match="127.0.0.1:9"):
        registry.schema_for(1)
