"""The catalog of every Avro schema version the project has ever written.

Loads `<name>.v<N>.avsc` files, parses them with fastavro, and indexes them by the CRC-64-AVRO
fingerprint of their Parsing Canonical Form (the 8 bytes in a single-object header) and by record
name and version. Decoders use it to find an event's writer schema; encoders to find the latest.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import fingerprint as avro_fingerprint
from fastavro.schema import to_parsing_canonical_form

from rft.errors import ConfigError, UnknownSchemaError

_FILE_NAME = re.compile(r"^(?P<stem>[a-z][a-z0-9_]*)\.v(?P<version>[1-9][0-9]*)\.avsc$")


class SchemaCatalogError(ConfigError):
    """A schema file is unreadable, invalid, misnamed, or clashes with another one."""


@dataclass(frozen=True)
class SchemaVersion:
    """One version of one record schema, parsed and fingerprinted."""

    name: str  # full record name, e.g. rft.events.Experience
    version: int
    path: Path
    definition: dict[str, Any]  # the JSON as written, logical types and docs included
    parsed: Any  # fastavro-parsed form the codec reads and writes with
    canonical_form: str
    fingerprint: bytes  # CRC-64-AVRO, 8 bytes little-endian, as in the single-object header

    @property
    def fingerprint_hex(self) -> str:
        return self.fingerprint.hex()

    @property
    def fingerprint_int(self) -> int:
        return int.from_bytes(self.fingerprint, "little")

    def __repr__(self) -> str:
        return f"SchemaVersion({self.name} v{self.version}, fingerprint={self.fingerprint_hex})"


def canonical_fingerprint(definition: Any) -> tuple[str, bytes]:
    """Parsing Canonical Form of a schema and its CRC-64-AVRO fingerprint (8 bytes LE)."""
    canonical = to_parsing_canonical_form(definition)
    # fastavro renders the fingerprint's little-endian bytes as hex
    return canonical, bytes.fromhex(avro_fingerprint(canonical, "CRC-64-AVRO"))


def runtime_schema(definition: Any) -> Any:
    """Parse `definition` for fastavro with logical types dropped.

    Timestamps stay integer milliseconds in the models; letting fastavro turn them into datetime
    objects and back would cost time on every event. Logical types are not part of the Parsing
    Canonical Form, so the fingerprint does not change.
    """
    return fastavro.parse_schema(_without_logical_types(copy.deepcopy(definition)), {})


def _without_logical_types(node: Any) -> Any:
    if isinstance(node, dict):
        node.pop("logicalType", None)
        for value in node.values():
            _without_logical_types(value)
    elif isinstance(node, list):
        for value in node:
            _without_logical_types(value)
    return node


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def default_schema_dir() -> Path:
    """The `schemas/` folder: next to the package in a checkout, else the installed package."""
    checkout = Path(__file__).resolve().parents[2] / "schemas"
    if any(checkout.glob("*.avsc")):
        return checkout
    spec = importlib.util.find_spec("rft.schemas")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if any(Path(location).glob("*.avsc")):
                return Path(location)
    raise SchemaCatalogError(
        f"no *.avsc files found in {checkout} nor in an installed 'rft.schemas' package"
    )


class SchemaCatalog:
    """Every schema version, by fingerprint and by (name, version)."""

    def __init__(self, versions: list[SchemaVersion]) -> None:
        self._by_fingerprint: dict[bytes, SchemaVersion] = {}
        self._by_name: dict[str, dict[int, SchemaVersion]] = {}
        for sv in versions:
            clash = self._by_fingerprint.get(sv.fingerprint)
            if clash is not None:
                raise SchemaCatalogError(
                    f"{sv.path} has the same canonical form (fingerprint {sv.fingerprint_hex}) "
                    f"as {clash.path}; a new version must change the schema"
                )
            known = self._by_name.setdefault(sv.name, {})
            if sv.version in known:
                raise SchemaCatalogError(
                    f"{sv.path} and {known[sv.version].path} both define {sv.name} v{sv.version}"
                )
            self._by_fingerprint[sv.fingerprint] = sv
            known[sv.version] = sv
        for name, known in self._by_name.items():
            expected = list(range(1, len(known) + 1))
            if sorted(known) != expected:
                raise SchemaCatalogError(
                    f"{name} has versions {sorted(known)}; versions must be 1..N with no gaps"
                )

    @classmethod
    def from_dir(cls, directory: str | Path) -> SchemaCatalog:
        """Load every `<name>.v<N>.avsc` in `directory`."""
        directory = Path(directory)
        paths = sorted(directory.glob("*.avsc"))
        if not paths:
            raise SchemaCatalogError(f"no *.avsc files in {directory}")
        return cls([load_schema_file(path) for path in paths])

    @classmethod
    def default(cls) -> SchemaCatalog:
        """The project's own schemas (loaded once per process)."""
        return _default_catalog()

    def by_fingerprint(self, fingerprint: bytes) -> SchemaVersion | None:
        return self._by_fingerprint.get(bytes(fingerprint))

    def get(self, name: str, version: int | None = None) -> SchemaVersion:
        """Version `version` of record `name` (full or short name); the latest when None."""
        known = self._by_name.get(name) or self._by_name.get(f"rft.events.{name}")
        if not known:
            raise UnknownSchemaError(f"no schema named {name!r}; known: {sorted(self._by_name)}")
        if version is None:
            return known[max(known)]
        try:
            return known[version]
        except KeyError:
            raise UnknownSchemaError(
                f"{name} has no version {version}; known versions: {sorted(known)}"
            ) from None

    def latest(self, name: str) -> SchemaVersion:
        return self.get(name)

    def versions(self, name: str) -> list[SchemaVersion]:
        self.get(name)
        known = self._by_name.get(name) or self._by_name[f"rft.events.{name}"]
        return [known[v] for v in sorted(known)]

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def __iter__(self) -> Iterator[SchemaVersion]:
        for name in self.names():
            yield from self.versions(name)

    def __len__(self) -> int:
        return len(self._by_fingerprint)


def load_schema_file(path: Path) -> SchemaVersion:
    """Read, check and parse one `<name>.v<N>.avsc` file."""
    match = _FILE_NAME.match(path.name)
    if match is None:
        raise SchemaCatalogError(f"{path}: schema files are named <snake_name>.v<N>.avsc")
    try:
        definition = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SchemaCatalogError(
            f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}"
        ) from exc
    except OSError as exc:
        raise SchemaCatalogError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(definition, dict) or definition.get("type") != "record":
        raise SchemaCatalogError(f"{path}: the top level must be an Avro record")
    try:
        parsed = runtime_schema(definition)
        canonical, fingerprint = canonical_fingerprint(definition)
    except Exception as exc:  # fastavro raises several unrelated types for bad schemas
        raise SchemaCatalogError(f"{path}: invalid Avro schema: {exc}") from exc
    name = parsed["name"]
    if _snake(name.rsplit(".", 1)[-1]) != match["stem"]:
        raise SchemaCatalogError(
            f"{path}: file name says {match['stem']!r} but the record is {name!r}"
        )
    return SchemaVersion(
        name=name,
        version=int(match["version"]),
        path=path,
        definition=definition,
        parsed=parsed,
        canonical_form=canonical,
        fingerprint=fingerprint,
    )


@functools.cache
def _default_catalog() -> SchemaCatalog:
    return SchemaCatalog.from_dir(default_schema_dir())
