"""Events defined once: each record dataclass and its newest .avsc agree field by field, and the
mapping derived from them refuses a dataclass or a schema that drifted from the other."""

from __future__ import annotations

import dataclasses
import json
import shutil
import typing
from dataclasses import field
from pathlib import Path
from typing import Any

import pytest

from rft.events.catalog import SchemaCatalog, default_schema_dir
from rft.events.models import RECORD_TYPES, Metric, SyncRequest, Task
from rft.events.transcoder import RecordDriftError, SchemaRecord, transcoder_of

CATALOG = SchemaCatalog.default()


def newest_records() -> dict[str, dict[str, Any]]:
    """Every record the newest schema versions define, by full name (walked independently of
    the transcoder)."""
    found: dict[str, dict[str, Any]] = {}

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for branch in node:
                walk(branch)
        elif isinstance(node, dict):
            if node.get("type") == "record":
                found[f"rft.events.{node['name'].rsplit('.', 1)[-1]}"] = node
                for item in node["fields"]:
                    walk(item["type"])
            for key in ("items", "values"):
                walk(node.get(key))

    for name in CATALOG.names():
        walk(CATALOG.latest(name).definition)
    return found


def python_default(item: dataclasses.Field[Any]) -> Any:
    if item.default is not dataclasses.MISSING:
        return item.default
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return dataclasses.MISSING


@pytest.mark.parametrize("cls", RECORD_TYPES, ids=lambda c: c.__name__)
def test_dataclass_fields_are_the_schema_fields(cls: type) -> None:
    schema = newest_records()[cls.SCHEMA]  # type: ignore[attr-defined]
    wire = {item["name"]: item for item in schema["fields"]}
    mine = {item.name: item for item in dataclasses.fields(cls)}
    assert sorted(mine) == sorted(wire), f"{cls.__name__} and {cls.SCHEMA} drifted apart"  # type: ignore[attr-defined]
    for name, item in wire.items():
        if "default" in item:  # what a record written before the field existed reads as
            default = python_default(mine[name])
            assert type(default) is type(item["default"]) and default == item["default"], name
    # and the mapping derived from the two builds (every type has a mapping)
    assert transcoder_of(cls).record_type is cls


def test_every_schema_record_has_a_record_class_or_is_a_tuple() -> None:
    classes = {cls.SCHEMA for cls in RECORD_TYPES}  # type: ignore[attr-defined]
    tuples = set()
    for cls in RECORD_TYPES:
        hints = typing.get_type_hints(cls)
        for item in newest_records()[cls.SCHEMA]["fields"]:  # type: ignore[attr-defined]
            hint = hints[item["name"]]
            args = typing.get_args(hint)
            if typing.get_origin(hint) is tuple and typing.get_origin(args[0]) is tuple:
                tuples.add(f"rft.events.{item['type']['items']['name']}")
    assert set(newest_records()) == classes | tuples
    assert not classes & tuples


def test_records_round_trip_through_the_derived_mapping() -> None:
    task = Task("t", "s", 1, 2, {"q": [1, 2]}, rollout_args={"temperature": 0.5}, position=4)
    record = task.to_record()
    assert set(record) == {f["name"] for f in CATALOG.latest(Task.SCHEMA).definition["fields"]}
    assert json.loads(record["payload"]) == {"q": [1, 2]}
    assert Task.from_record(record) == task


# --- drift is refused, naming the field -----------------------------------------------------


def drifted(name: str, like: type, fields: list[tuple[Any, ...]]) -> type:
    """A record dataclass that claims `like`'s schema with `fields`."""
    return dataclasses.make_dataclass(
        name, fields, bases=(SchemaRecord,), namespace={"SCHEMA": like.SCHEMA}, frozen=True
    )


SYNC = [("explorer_id", str), ("current_version", int), ("step", int), ("requested_at", int)]
METRIC = [("component", str), ("run", str), ("step", int), ("values", dict[str, float])]
ExtraField = drifted("ExtraField", SyncRequest, [*SYNC, ("priority", int, field(default=0))])
MissingField = drifted("MissingField", SyncRequest, [f for f in SYNC if f[0] != "step"])
WrongType = drifted("WrongType", SyncRequest, [SYNC[0], ("current_version", str), *SYNC[2:]])
WrongDefault = drifted(
    "WrongDefault",
    Metric,
    [
        *METRIC,
        ("timestamp", int),
        ("tags", dict[str, str], field(default_factory=lambda: {"a": "b"})),
    ],
)
NoDefault = drifted("NoDefault", Metric, [*METRIC, ("timestamp", int), ("tags", dict[str, str])])


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (ExtraField, r"only in the dataclass: \['priority'\]"),
        (MissingField, r"only in the schema: \['step'\]"),
        (WrongType, r"WrongType\.current_version: no mapping of Avro 'long' to <class 'str'>"),
        (WrongDefault, r"WrongDefault\.tags: the schema's default is \{\}"),
        (NoDefault, r"NoDefault\.tags: the schema's default is \{\} but the dataclass has none"),
    ],
)
def test_a_dataclass_that_drifted_from_its_schema_is_refused(cls: type, message: str) -> None:
    with pytest.raises(RecordDriftError, match=message):
        transcoder_of(cls)
    with pytest.raises(RecordDriftError, match=message):  # on first use, not silently
        cls(*[None] * len(dataclasses.fields(cls)))


def test_a_schema_that_drifted_from_its_dataclass_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "schemas"
    shutil.copytree(default_schema_dir(), target, ignore=shutil.ignore_patterns("*.py"))
    newest = target / "sync_request.v1.avsc"
    definition = json.loads(newest.read_text())
    definition["fields"][1]["name"] = "version_now"  # a rename in the .avsc alone
    newest.write_text(json.dumps(definition))
    with pytest.raises(RecordDriftError, match=r"\['version_now'\].*\['current_version'\]"):
        transcoder_of(SyncRequest, SchemaCatalog.from_dir(target))
    definition["fields"][1]["name"] = "current_version"
    definition["fields"][2]["type"] = "string"  # a type change in the .avsc alone
    newest.write_text(json.dumps(definition))
    with pytest.raises(RecordDriftError, match=r"SyncRequest\.step: no mapping of Avro 'string'"):
        transcoder_of(SyncRequest, SchemaCatalog.from_dir(target))


def test_array_annotations_of_either_numpy_spelling_map_to_their_scalar() -> None:
    """npt.NDArray is ndarray[shape, dtype[T]] in numpy 2.4 and a `type` alias of that in 2.5
    (the GPU machine's), whose Experience fields were then refused as schema drift."""
    import numpy as np
    import numpy.typing as npt
    from typing_extensions import TypeAliasType, TypeVar

    from rft.events.transcoder import _array_scalar

    scalar = TypeVar("scalar", bound=np.generic)
    alias = TypeAliasType(
        "alias", np.ndarray[tuple[Any, ...], np.dtype[scalar]], type_params=(scalar,)
    )
    assert _array_scalar(npt.NDArray[np.int32]) is np.int32
    assert _array_scalar(alias[np.float32]) is np.float32
    assert _array_scalar(alias) is None and _array_scalar(list[np.int32]) is None
