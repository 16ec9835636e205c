"""Avro single-object encoding of rft events: `C3 01` + 8-byte fingerprint + schemaless body.

`EventCodec.encode` writes an event with the latest schema of its type (or a pinned version);
`decode` reads with the writer schema the fingerprint names and resolves to the reader schema.
Experience events at their newest schema version go through generated straight-line code
(`fast_experience`), byte for byte the same; anything it does not accept takes the fastavro path.
Every failure is typed: EncodeError naming the field; TruncatedEventError, UnknownSchemaError or
CorruptEventError (with the byte position) for bad bytes. No other exception escapes `decode`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any

import fastavro
from fastavro.validation import ValidationError
from fastavro.validation import validate as avro_validate

from rft.errors import (
    CorruptEventError,
    DecodeError,
    EncodeError,
    TruncatedEventError,
    UnknownSchemaError,
)
from rft.events import fast_experience
from rft.events.catalog import SchemaCatalog, SchemaVersion
from rft.events.models import EVENT_TYPES, Event, Experience
from rft.events.transcoder import transcoder_of

MAGIC = b"\xc3\x01"
HEADER_SIZE = 10  # magic + 8-byte fingerprint
DEFAULT_MAX_EVENT_BYTES = 256 * 1024 * 1024
"""A length prefix above this is corruption, not truncation (far above Kafka's message limits)."""


@dataclass(frozen=True, slots=True)
class _WritePlan:
    header: bytes
    schema: Any
    version: SchemaVersion
    to_record: Callable[[Any], dict[str, Any]]  # event -> Avro record of the newest schema
    fast_encode: fast_experience.Encoder | None = None  # record -> header + body


@dataclass(frozen=True, slots=True)
class ReadPlan:
    writer: Any
    reader: Any | None  # None when the writer schema is the reader schema: no resolution needed
    event_type: type[Any]
    version: SchemaVersion
    from_record: Callable[[Any], Any]  # decoded Avro record -> event (rft.events.transcoder)
    fast_decode: fast_experience.Decoder | None = None  # (data, body start) -> record


class EventCodec:
    """Encodes and decodes events against a `SchemaCatalog`.

    `write_versions` pins the schema version written per record name (e.g. keep writing
    Experience v1 until every reader is upgraded); `read_versions` pins the version decoded into
    (an old reader). Both default to the latest version in the catalog.
    """

    def __init__(
        self,
        catalog: SchemaCatalog,
        *,
        event_types: Iterable[type[Any]] = EVENT_TYPES,
        write_versions: Mapping[str, int] | None = None,
        read_versions: Mapping[str, int] | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self.catalog = catalog
        self.max_event_bytes = max_event_bytes
        write_versions = _full_names(write_versions or {})
        read_versions = _full_names(read_versions or {})
        self._writers: dict[type[Any], _WritePlan] = {}
        self._readers: dict[bytes, ReadPlan] = {}
        for event_type in event_types:
            name = event_type.SCHEMA
            latest = catalog.latest(name)
            # only Experience is hot enough to earn generated code, and only its newest version
            fast = _fast_codec(latest) if event_type is Experience else None
            written = catalog.get(name, write_versions.get(name))
            transcoder = transcoder_of(event_type)
            self._writers[event_type] = _WritePlan(
                header=MAGIC + written.fingerprint,
                schema=written.parsed,
                version=written,
                to_record=transcoder.to_record,
                fast_encode=fast.encode if fast is not None and written is latest else None,
            )
            reader = catalog.get(name, read_versions.get(name))
            for writer in catalog.versions(name):
                self._readers[writer.fingerprint] = ReadPlan(
                    writer=writer.parsed,
                    reader=None if writer is reader else reader.parsed,
                    event_type=event_type,
                    version=writer,
                    from_record=transcoder.from_record,
                    fast_decode=(
                        fast.decode
                        if fast is not None and writer is latest and reader is latest
                        else None
                    ),
                )

    @classmethod
    def default(cls) -> EventCodec:
        """A codec over the project's schemas, writing and reading the latest versions."""
        return _default_codec()

    def schema_for(self, event_type: type[Any]) -> SchemaVersion:
        """The schema version `encode` writes for `event_type`."""
        return self._plan_for(event_type).version

    def encode(self, event: Event) -> bytes:
        """Single-object encoding of `event`; EncodeError names the offending field."""
        plan = self._plan_for(type(event))
        record = plan.to_record(event)
        if plan.fast_encode is not None:
            try:
                return plan.fast_encode(record)
            except Exception:  # fastavro below encodes it, or names the failure
                pass
        buffer = BytesIO()
        buffer.write(plan.header)
        try:
            fastavro.schemaless_writer(buffer, plan.schema, record)
        except Exception as exc:
            raise EncodeError(_encode_failure(plan, record, exc)) from exc
        return buffer.getvalue()

    def encode_body(self, event: Event) -> tuple[SchemaVersion, bytes]:
        """The schemaless Avro body of `event` and the schema version it was written with."""
        data = self.encode(event)
        return self._plan_for(type(event)).version, data[HEADER_SIZE:]

    def decode(self, data: bytes | bytearray | memoryview) -> Event:
        """The event in `data`; raises only DecodeError subclasses."""
        if type(data) is not bytes:
            if not isinstance(data, bytes | bytearray | memoryview):
                raise CorruptEventError(f"expected bytes, got {type(data).__name__}")
            data = bytes(data)
        if len(data) < HEADER_SIZE or data[:2] != MAGIC:
            if MAGIC.startswith(data[:2]) and len(data) < HEADER_SIZE:
                raise TruncatedEventError(
                    f"{len(data)} bytes end inside the {HEADER_SIZE}-byte single-object header"
                )
            raise CorruptEventError(
                f"bad magic {data[:2].hex()!r}: not an Avro single-object event (expected c301)"
            )
        plan = self._readers.get(data[2:HEADER_SIZE])
        if plan is None:
            raise UnknownSchemaError(
                f"unknown schema fingerprint {data[2:HEADER_SIZE].hex()} (CRC-64-AVRO, "
                f"little-endian); the catalog knows {len(self.catalog)} schemas"
            )
        return self.decode_body(plan, data, HEADER_SIZE)

    def decode_body(self, plan: ReadPlan, data: bytes, start: int) -> Event:
        """Decode the Avro body at `data[start:]` written with `plan`'s writer schema."""
        if plan.fast_decode is not None and type(data) is bytes:
            try:
                return plan.from_record(plan.fast_decode(data, start))  # type: ignore[no-any-return]
            except Exception:  # fastavro below decodes it, or types the failure
                pass
        buffer = BytesIO(data)
        buffer.seek(start)
        try:
            record = fastavro.schemaless_reader(buffer, plan.writer, plan.reader)
        except Exception as exc:
            raise diagnose(plan.writer, data, start, self.max_event_bytes, plan.version) from exc
        end = buffer.tell()
        if end != len(data):
            raise CorruptEventError(
                f"{len(data) - end} trailing bytes after the {plan.version.name} "
                f"v{plan.version.version} event that ends at byte {end}"
            )
        try:
            return plan.from_record(record)  # type: ignore[no-any-return]
        except Exception as exc:
            raise CorruptEventError(
                f"{plan.version.name} v{plan.version.version} body decodes but is not a valid "
                f"event: {exc}"
            ) from exc

    def read_plan(self, writer: SchemaVersion) -> ReadPlan:
        """How events written with `writer` are read (for framings other than single-object)."""
        plan = self._readers.get(writer.fingerprint)
        if plan is None:
            raise UnknownSchemaError(f"{writer!r} is not a schema this codec reads")
        return plan

    def _plan_for(self, event_type: type[Any]) -> _WritePlan:
        plan = self._writers.get(event_type)
        if plan is None:
            raise EncodeError(f"{event_type.__name__} is not an event type this codec encodes")
        return plan


@functools.cache
def _default_codec() -> EventCodec:
    return EventCodec(SchemaCatalog.default())


_FAST_CODECS: dict[bytes, fast_experience.FastCodec | None] = {}


def _fast_codec(version: SchemaVersion) -> fast_experience.FastCodec | None:
    # generating takes milliseconds and codecs are built often; the fingerprint fixes the layout
    if version.fingerprint not in _FAST_CODECS:
        try:
            fast = fast_experience.compile_codec(version.definition, MAGIC + version.fingerprint)
        except fast_experience.UnsupportedSchemaError:
            fast = None  # a schema shape the generator lacks: fastavro serves it, only slower
        _FAST_CODECS[version.fingerprint] = fast
    return _FAST_CODECS[version.fingerprint]


def _full_names(versions: Mapping[str, int]) -> dict[str, int]:
    return {(n if "." in n else f"rft.events.{n}"): v for n, v in versions.items()}


def _encode_failure(plan: _WritePlan, record: dict[str, Any], exc: Exception) -> str:
    where = f"{plan.version.name} v{plan.version.version}"
    try:
        avro_validate(record, plan.schema, raise_errors=True)
    except ValidationError as invalid:
        return f"{where}: {'; '.join(str(e) for e in invalid.errors)}"
    except Exception:  # validation itself broke; fastavro's own message is the best we have
        pass
    return f"{where}: {type(exc).__name__}: {exc}"


class _Truncated(Exception):
    pass


class _Corrupt(Exception):
    pass


def diagnose(
    schema: Any, data: bytes, start: int, max_event_bytes: int, version: SchemaVersion
) -> DecodeError:
    """Explain why `data[start:]` does not decode with `schema`, as a typed DecodeError.

    Only runs after the fast decoder failed, so it can afford to walk the bytes in Python and
    name the field and byte position where they go wrong.
    """
    label = f"{version.name} v{version.version}"
    walker = _BodyWalker(data, start, max_event_bytes)
    try:
        end = walker.walk(schema, version.name.rsplit(".", 1)[-1])
    except _Truncated as exc:
        return TruncatedEventError(f"{label}: {exc}")
    except _Corrupt as exc:
        return CorruptEventError(f"{label}: {exc}")
    except RecursionError:
        return CorruptEventError(f"{label}: body nests too deeply")
    if end != len(data):
        return CorruptEventError(f"{label}: {len(data) - end} trailing bytes at byte {end}")
    return CorruptEventError(f"{label}: body does not decode")


class _BodyWalker:
    """Steps through an Avro body by schema without building values, checking every length."""

    def __init__(self, data: bytes, pos: int, max_event_bytes: int) -> None:
        self.data = data
        self.pos = pos
        self.max = max_event_bytes
        self.named: dict[str, Any] = {}

    def walk(self, schema: Any, path: str) -> int:
        self._value(schema, path)
        return self.pos

    def _long(self, path: str) -> int:
        result = shift = 0
        for i in range(10):
            if self.pos >= len(self.data):
                raise _Truncated(f"bytes end at byte {self.pos} inside the varint of {path}")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
            if i == 9:
                break
        raise _Corrupt(f"varint of {path} at byte {self.pos - 10} is longer than 10 bytes")

    def _skip(self, size: int, path: str) -> int:
        if size < 0:
            raise _Corrupt(f"{path} declares a negative length {size} at byte {self.pos}")
        remaining = len(self.data) - self.pos
        if size > remaining:
            if size > self.max:
                raise _Corrupt(
                    f"{path} declares {size} bytes at byte {self.pos}, more than the "
                    f"{remaining} left and the {self.max}-byte event limit"
                )
            raise _Truncated(
                f"{path} declares {size} bytes at byte {self.pos} but only {remaining} remain"
            )
        start = self.pos
        self.pos += size
        return start

    def _value(self, schema: Any, path: str) -> None:
        if isinstance(schema, list):
            at = self.pos
            index = self._long(path)
            if not 0 <= index < len(schema):
                raise _Corrupt(f"{path} has union branch {index} at byte {at}")
            self._value(schema[index], path)
            return
        if isinstance(schema, str):
            if schema in self.named:
                self._value(self.named[schema], path)
            else:
                self._primitive(schema, path)
            return
        kind = schema["type"]
        if kind == "record":
            self.named[schema["name"]] = schema
            for item in schema["fields"]:
                self._value(item["type"], f"{path}.{item['name']}")
        elif kind in ("array", "map"):
            self._blocks(schema, path, is_map=kind == "map")
        elif kind == "enum":
            self.named[schema["name"]] = schema
            at = self.pos
            index = self._long(path)
            if not 0 <= index < len(schema["symbols"]):
                raise _Corrupt(f"{path} has enum index {index} at byte {at}")
        elif kind == "fixed":
            self.named[schema["name"]] = schema
            self._skip(schema["size"], path)
        else:
            self._primitive(kind, path)

    def _blocks(self, schema: Any, path: str, *, is_map: bool) -> None:
        items = schema["values"] if is_map else schema["items"]
        index = 0
        while True:
            count = self._long(f"{path} block count")
            if count == 0:
                return
            if count < 0:
                count = -count
                self._long(f"{path} block size")
            # every item takes at least one byte, except nulls and records without fields
            if count > len(self.data) - self.pos and _min_size(items) > 0:
                if count > self.max:
                    raise _Corrupt(f"{path} declares {count} items at byte {self.pos}")
                raise _Truncated(f"{path} declares {count} items with too few bytes left")
            for _ in range(count):
                if is_map:
                    key = self._skip(self._long(f"{path} key"), f"{path} key")
                    self._utf8(key, f"{path} key")
                self._value(items, f"{path}[{index}]")
                index += 1

    def _primitive(self, kind: str, path: str) -> None:
        if kind == "null":
            return
        if kind == "boolean":
            start = self._skip(1, path)
            if self.data[start] > 1:
                raise _Corrupt(f"{path} boolean byte {self.data[start]} at byte {start}")
        elif kind in ("int", "long"):
            self._long(path)
        elif kind == "float":
            self._skip(4, path)
        elif kind == "double":
            self._skip(8, path)
        elif kind == "bytes":
            self._skip(self._long(path), path)
        elif kind == "string":
            self._utf8(self._skip(self._long(path), path), path)
        else:
            raise _Corrupt(f"{path} has unknown type {kind!r}")

    def _utf8(self, start: int, path: str) -> None:
        try:
            self.data[start : self.pos].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Corrupt(f"{path} at byte {start + exc.start} is not UTF-8") from None


def _min_size(schema: Any) -> int:
    if schema == "null":
        return 0
    if isinstance(schema, dict) and schema.get("type") == "record":
        return sum(_min_size(f["type"]) for f in schema["fields"])
    return 1
