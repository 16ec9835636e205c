"""The checkpoint manifest: the one object that makes a checkpoint version exist.

`CheckpointManifest` lists every file of a version with its size and sha256, the experience
offsets the trainer had consumed, the parent version and free-form extras. It is what the
WeightVersion event mirrors. JSON in and out; malformed JSON (bad bytes, absurdly long numbers,
deep nesting) raises CheckpointError naming the field and the source, and nothing else escapes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from rft.errors import CheckpointError, StorageError
from rft.storage.object_store_base import validate_key

MANIFEST_NAME = "manifest.json"
#: Bumped when the manifest's JSON layout changes incompatibly.
MANIFEST_FORMAT = 1

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ManifestFile:
    """One file of a checkpoint: path relative to the version directory, size, sha256 hex."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class ConsumedOffset:
    """Kafka position consumed up to this version: `offset` is the next offset to read
    (Kafka's committed-offset convention), so a resumed trainer seeks straight to it."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class CheckpointManifest:
    version: int
    train_step: int
    created_at: int  # ms since the epoch
    files: tuple[ManifestFile, ...]
    consumed_offsets: tuple[ConsumedOffset, ...] = ()
    parent_version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)

    def file(self, name: str) -> ManifestFile:
        for entry in self.files:
            if entry.name == name:
                return entry
        raise CheckpointError(f"checkpoint v{self.version} has no file {name!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "version": self.version,
            "train_step": self.train_step,
            "created_at": self.created_at,
            "files": [{"name": f.name, "size": f.size, "sha256": f.sha256} for f in self.files],
            "consumed_offsets": [
                {"topic": o.topic, "partition": o.partition, "offset": o.offset}
                for o in self.consumed_offsets
            ],
            "parent_version": self.parent_version,
            "extra": self.extra,
        }

    def to_json(self) -> bytes:
        try:
            text = json.dumps(self.to_dict(), indent=2, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(
                f"checkpoint v{self.version}: manifest extras are not JSON-serializable: {exc}"
            ) from exc
        return text.encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes | str, source: str = "manifest") -> CheckpointManifest:
        """Parse and validate; `source` (e.g. the manifest's URI) is named in every error."""
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{source}: manifest is not valid JSON: {exc}") from exc
        except ValueError as exc:  # an integer past Python's digit limit (int_max_str_digits)
            raise CheckpointError(f"{source}: manifest holds an unreadable number: {exc}") from exc
        except RecursionError as exc:  # arrays or objects nested thousands deep
            raise CheckpointError(f"{source}: manifest nests too deeply to parse") from exc
        return cls.from_dict(raw, source)

    @classmethod
    def from_dict(cls, raw: Any, source: str = "manifest") -> CheckpointManifest:
        if not isinstance(raw, dict):
            raise CheckpointError(f"{source}: manifest must be a JSON object")
        fmt = raw.get("format")
        if fmt != MANIFEST_FORMAT:
            raise CheckpointError(
                f"{source}: manifest format {fmt!r} is not supported (expected {MANIFEST_FORMAT})"
            )
        files = tuple(
            ManifestFile(
                name=_str(entry, "name", f"{source}: files[{i}]"),
                size=_int(entry, "size", f"{source}: files[{i}]", minimum=0),
                sha256=_sha256(entry, f"{source}: files[{i}]"),
            )
            for i, entry in enumerate(_list(raw, "files", source))
        )
        for entry in files:
            _check_file_name(entry.name, source)
        names = [f.name for f in files]
        if len(set(names)) != len(names):
            raise CheckpointError(f"{source}: files lists a name twice")
        offsets = tuple(
            ConsumedOffset(
                topic=_str(entry, "topic", f"{source}: consumed_offsets[{i}]"),
                partition=_int(entry, "partition", f"{source}: consumed_offsets[{i}]", minimum=0),
                offset=_int(entry, "offset", f"{source}: consumed_offsets[{i}]", minimum=0),
            )
            for i, entry in enumerate(_list(raw, "consumed_offsets", source))
        )
        parent = raw.get("parent_version")
        if parent is not None:
            parent = _int(raw, "parent_version", source, minimum=0)
        extra = raw.get("extra", {})
        if not isinstance(extra, dict):
            raise CheckpointError(f"{source}: 'extra' must be a JSON object")
        return cls(
            version=_int(raw, "version", source, minimum=1),
            train_step=_int(raw, "train_step", source, minimum=0),
            created_at=_int(raw, "created_at", source, minimum=0),
            files=files,
            consumed_offsets=offsets,
            parent_version=parent,
            extra=extra,
        )


def _check_file_name(name: str, where: str) -> None:
    # A name like '../x' would let a manifest write outside the download directory.
    try:
        validate_key(name)
    except StorageError as exc:
        raise CheckpointError(f"{where}: bad file name {name!r}: {exc}") from exc
    if name == MANIFEST_NAME:
        raise CheckpointError(f"{where}: a checkpoint file may not be named {MANIFEST_NAME!r}")


def _field(raw: Any, key: str, where: str) -> Any:
    if not isinstance(raw, dict):
        raise CheckpointError(f"{where}: expected a JSON object")
    if key not in raw:
        raise CheckpointError(f"{where}: missing field {key!r}")
    return raw[key]


def _int(raw: Any, key: str, where: str, minimum: int) -> int:
    value = _field(raw, key, where)
    # bool is an int subclass; true/false in a size or offset field is a bug, not a number
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise CheckpointError(
            f"{where}: field {key!r} must be an integer >= {minimum}, got {value!r}"
        )
    return value


def _str(raw: Any, key: str, where: str) -> str:
    value = _field(raw, key, where)
    if not isinstance(value, str) or not value:
        raise CheckpointError(f"{where}: field {key!r} must be a non-empty string, got {value!r}")
    return value


def _sha256(raw: Any, where: str) -> str:
    value = _str(raw, "sha256", where)
    if not _SHA256.match(value):
        raise CheckpointError(f"{where}: field 'sha256' must be 64 lowercase hex digits")
    return value


def _list(raw: dict[str, Any], key: str, where: str) -> list[Any]:
    value = _field(raw, key, where)
    if not isinstance(value, list):
        raise CheckpointError(f"{where}: field {key!r} must be a JSON array")
    return value
