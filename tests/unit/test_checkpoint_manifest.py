"""CheckpointManifest JSON round trips (property-based) and errors that name the bad field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.errors import CheckpointError
from rft.storage.checkpoint_manifest import CheckpointManifest, ConsumedOffset, ManifestFile

names = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=10).filter(
        lambda s: s not in (".", "..", "manifest.json")
    ),
    min_size=1,
    max_size=3,
).map("/".join)
hexdigests = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def manifests(draw: st.DrawFn) -> CheckpointManifest:
    version = draw(st.integers(1, 10**7))
    files = draw(
        st.lists(
            st.builds(ManifestFile, name=names, size=st.integers(0, 2**40), sha256=hexdigests),
            max_size=5,
            unique_by=lambda f: f.name,
        )
    )
    offsets = draw(
        st.lists(
            st.builds(
                ConsumedOffset,
                topic=st.text(min_size=1, max_size=20),
                partition=st.integers(0, 1000),
                offset=st.integers(0, 2**62),
            ),
            max_size=4,
        )
    )
    return CheckpointManifest(
        version=version,
        train_step=draw(st.integers(0, 10**9)),
        created_at=draw(st.integers(0, 2**45)),
        files=tuple(files),
        consumed_offsets=tuple(offsets),
        parent_version=draw(st.none() | st.integers(0, version - 1)),
        extra=draw(st.dictionaries(st.text(max_size=8), json_values, max_size=4)),
    )


@given(manifests())
def test_json_round_trip(manifest: CheckpointManifest) -> None:
    assert CheckpointManifest.from_json(manifest.to_json()) == manifest


def _valid() -> dict[str, Any]:
    return {
        "format": 1,
        "version": 3,
        "train_step": 30,
        "created_at": 1,
        "files": [{"name": "model.safetensors", "size": 4, "sha256": "ab" * 32}],
        "consumed_offsets": [{"topic": "p.r.experiences", "partition": 0, "offset": 12}],
        "parent_version": 2,
        "extra": {},
    }


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        (("version",), 0, "'version' must be an integer >= 1"),
        (("train_step",), "3", "'train_step' must be an integer"),
        (("format",), 99, "format 99 is not supported"),
        (("files", 0, "size"), -1, r"files\[0\]: field 'size'"),
        (("files", 0, "size"), True, r"files\[0\]: field 'size'"),
        (("files", 0, "sha256"), "XYZ", r"files\[0\]: field 'sha256'"),
        (("files", 0, "name"), "../escape", "bad file name '../escape'"),
        (("files", 0, "name"), "manifest.json", "may not be named"),
        (("consumed_offsets", 0, "offset"), -5, r"consumed_offsets\[0\]: field 'offset'"),
        (("parent_version",), "x", "'parent_version'"),
        (("extra",), [1], "'extra' must be a JSON object"),
    ],
)
def test_bad_fields_are_named_with_the_source(
    path: tuple[Any, ...], value: Any, words: str
) -> None:
    raw = _valid()
    target: Any = raw
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises(CheckpointError, match=words) as err:
        CheckpointManifest.from_json(json.dumps(raw), source="s3://b/p/v000003/manifest.json")
    assert str(err.value).startswith("s3://b/p/v000003/manifest.json")


def test_missing_field_and_garbage_are_errors() -> None:
    raw = _valid()
    del raw["files"]
    with pytest.raises(CheckpointError, match="missing field 'files'"):
        CheckpointManifest.from_dict(raw)
    with pytest.raises(CheckpointError, match="not valid JSON"):
        CheckpointManifest.from_json(b"\xff{", source="m")
    with pytest.raises(CheckpointError, match="must be a JSON object"):
        CheckpointManifest.from_json("[]")
    raw = _valid()
    raw["files"].append(dict(raw["files"][0]))
    with pytest.raises(CheckpointError, match="twice"):
        CheckpointManifest.from_dict(raw)


def test_unserializable_extra_fails_with_version() -> None:
    manifest = CheckpointManifest(1, 1, 1, (), extra={"x": object()})
    with pytest.raises(CheckpointError, match="v1: manifest extras"):
        manifest.to_json()
