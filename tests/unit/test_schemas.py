"""The schema files and the catalog: docs, fingerprints, naming and evolution rules."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import fastavro
import pytest

from rft.errors import ConfigError, UnknownSchemaError
from rft.events.catalog import SchemaCatalog, canonical_fingerprint, default_schema_dir
from rft.events.models import EVENT_TYPES

EMPTY = 0xC15D213AA4D7A795


def rabin_fingerprint(text: str) -> int:
    """CRC-64-AVRO, written from the Avro specification as an independent reference."""
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (EMPTY & -(fp & 1))
        table.append(fp)
    fp = EMPTY
    for byte in text.encode("utf-8"):
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def _fields(node: object, where: str) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = []
    if isinstance(node, dict):
        if node.get("type") == "record":
            for item in node["fields"]:
                out.append((f"{where}.{item['name']}", item))
                out.extend(_fields(item["type"], f"{where}.{item['name']}"))
        else:
            for key in ("items", "values"):
                if key in node:
                    out.extend(_fields(node[key], where))
    elif isinstance(node, list):
        for branch in node:
            out.extend(_fields(branch, where))
    return out


def test_every_event_type_has_a_schema_and_every_schema_an_event_type() -> None:
    catalog = SchemaCatalog.default()
    assert sorted(t.SCHEMA for t in EVENT_TYPES) == catalog.names()


@pytest.mark.parametrize("path", sorted(default_schema_dir().glob("*.avsc")), ids=lambda p: p.name)
def test_schema_file_documents_every_field(path: Path) -> None:
    definition = json.loads(path.read_text())
    assert definition["namespace"] == "rft.events"
    assert definition.get("doc")
    fields = _fields(definition, definition["name"])
    assert fields
    undocumented = [name for name, item in fields if not item.get("doc", "").strip()]
    assert undocumented == []


def test_fingerprints_match_the_spec_algorithm() -> None:
    # two independent implementations must agree on every schema we ship
    canonical, fp = canonical_fingerprint("int")
    assert canonical == '"int"'
    assert int.from_bytes(fp, "little") == rabin_fingerprint('"int"')
    for schema in SchemaCatalog.default():
        assert schema.fingerprint_int == rabin_fingerprint(schema.canonical_form), schema


def test_packed_token_fields_are_bytes_with_their_dtype_documented() -> None:
    experience = SchemaCatalog.default().latest("Experience").definition
    by_name = {f["name"]: f for f in experience["fields"]}
    for name, dtype in [
        ("prompt_ids", "int32"),
        ("response_ids", "int32"),
        ("logprobs", "float32"),
        ("action_mask", "uint8"),
        ("token_rewards", "float32"),
    ]:
        assert by_name[name]["type"] in ("bytes", ["null", "bytes"])
        assert dtype in by_name[name]["doc"]


def test_latest_reads_every_older_version_and_fills_defaults() -> None:
    catalog = SchemaCatalog.default()
    for name in catalog.names():
        latest = catalog.latest(name)
        for old in catalog.versions(name)[:-1]:
            added = {f["name"] for f in latest.definition["fields"]} - {
                f["name"] for f in old.definition["fields"]
            }
            assert added, f"{latest!r} adds nothing over {old!r}"
            for item in latest.definition["fields"]:
                if item["name"] in added:
                    assert "default" in item, f"{name}.{item['name']} needs a default"


def test_catalog_lookups() -> None:
    catalog = SchemaCatalog.default()
    assert catalog.get("Experience").version == 4
    assert catalog.get("rft.events.Experience", 1).version == 1
    assert catalog.by_fingerprint(catalog.get("Metric", 1).fingerprint).version == 1
    assert catalog.by_fingerprint(b"\x00" * 8) is None
    with pytest.raises(UnknownSchemaError, match="Nope"):
        catalog.get("Nope")
    with pytest.raises(UnknownSchemaError, match="no version 9"):
        catalog.get("Task", 9)


def _copy_schemas(tmp_path: Path) -> Path:
    target = tmp_path / "schemas"
    shutil.copytree(default_schema_dir(), target, ignore=shutil.ignore_patterns("*.py"))
    return target


def test_catalog_rejects_bad_json_naming_file_and_line(tmp_path: Path) -> None:
    target = _copy_schemas(tmp_path)
    (target / "task.v2.avsc").write_text('{\n  "type": "record",\n  "name": oops\n}\n')
    with pytest.raises(ConfigError, match=r"task\.v2\.avsc:3:"):
        SchemaCatalog.from_dir(target)


def test_catalog_rejects_misnamed_file(tmp_path: Path) -> None:
    target = _copy_schemas(tmp_path)
    shutil.copy(target / "task.v1.avsc", target / "metric.v3.avsc")
    with pytest.raises(ConfigError, match="record is 'rft.events.Task'"):
        SchemaCatalog.from_dir(target)


def test_catalog_rejects_a_version_that_changes_nothing(tmp_path: Path) -> None:
    target = _copy_schemas(tmp_path)
    definition = json.loads((target / "task.v1.avsc").read_text())
    definition["doc"] = "only the doc changed"
    (target / "task.v2.avsc").write_text(json.dumps(definition))
    with pytest.raises(ConfigError, match="same canonical form"):
        SchemaCatalog.from_dir(target)


def test_catalog_rejects_version_gaps(tmp_path: Path) -> None:
    target = _copy_schemas(tmp_path)
    (target / "metric.v2.avsc").rename(target / "metric.v3.avsc")
    with pytest.raises(ConfigError, match="no gaps"):
        SchemaCatalog.from_dir(target)


def test_catalog_rejects_invalid_avro(tmp_path: Path) -> None:
    target = _copy_schemas(tmp_path)
    bad = {"type": "record", "name": "Task", "namespace": "rft.events", "fields": [{"name": "x"}]}
    (target / "task.v2.avsc").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match="invalid Avro schema"):
        SchemaCatalog.from_dir(target)


def test_runtime_schema_keeps_timestamps_as_integers() -> None:
    import io

    schema = SchemaCatalog.default().get("SyncRequest")
    buffer = io.BytesIO()
    record = {"explorer_id": "e", "current_version": 1, "step": 2, "requested_at": 1234}
    fastavro.schemaless_writer(buffer, schema.parsed, record)
    buffer.seek(0)
    assert fastavro.schemaless_reader(buffer, schema.parsed, None)["requested_at"] == 1234
