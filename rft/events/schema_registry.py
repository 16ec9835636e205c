"""Confluent wire format for users who run a Confluent-compatible schema registry.

Framing is magic `00` + 4-byte big-endian schema id + the Avro body; subjects follow the topic name
strategy (`<topic>-value`). `RegistryCodec` frames events given any `SchemaIdSource`: the HTTP
client here (stdlib urllib, used only when `KafkaSettings.schema_registry_url` is set) or a fixed
id map. Ids are cached, so the registry is asked once per schema.
"""

from __future__ import annotations

import json
import struct
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, Protocol

from rft.errors import CorruptEventError, TransportError, TruncatedEventError, UnknownSchemaError
from rft.events.catalog import SchemaCatalog, SchemaVersion, canonical_fingerprint
from rft.events.codec import EventCodec
from rft.events.models import Event

CONFLUENT_MAGIC = 0
_ID = struct.Struct(">bI")
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def value_subject(topic: str) -> str:
    """Subject of a topic's values under the topic name strategy."""
    return f"{topic}-value"


class SchemaIdSource(Protocol):
    """Maps schemas to registry ids and back."""

    def id_for(self, subject: str, schema: SchemaVersion) -> int: ...

    def schema_for(self, schema_id: int) -> Any: ...


class StaticSchemaIds:
    """A fixed id map, for deployments that pin ids (and for framing without a registry)."""

    def __init__(self, ids: Mapping[tuple[str, bytes], int], schemas: Mapping[int, Any]) -> None:
        self._ids = dict(ids)  # (subject, fingerprint) -> id
        self._schemas = dict(schemas)  # id -> schema definition

    def id_for(self, subject: str, schema: SchemaVersion) -> int:
        try:
            return self._ids[(subject, schema.fingerprint)]
        except KeyError:
            raise UnknownSchemaError(f"no schema id for {subject} {schema!r}") from None

    def schema_for(self, schema_id: int) -> Any:
        try:
            return self._schemas[schema_id]
        except KeyError:
            raise UnknownSchemaError(f"unknown schema id {schema_id}") from None


class HttpSchemaRegistry:
    """Minimal client of the Confluent schema registry REST API (register, look up by id)."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def id_for(self, subject: str, schema: SchemaVersion) -> int:
        """Register `schema` under `subject` (idempotent: returns the existing id if known)."""
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
        reply = self._call("POST", path, {"schema": json.dumps(schema.definition)})
        return int(reply["id"])

    def schema_for(self, schema_id: int) -> Any:
        return json.loads(self._call("GET", f"/schemas/ids/{int(schema_id)}")["schema"])

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": _CONTENT_TYPE, "Accept": _CONTENT_TYPE},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            if exc.code == 404:
                raise UnknownSchemaError(f"{method} {self.url}{path}: {detail}") from exc
            raise TransportError(f"{method} {self.url}{path}: HTTP {exc.code} {detail}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise TransportError(f"{method} {self.url}{path}: {exc}") from exc


class RegistryCodec:
    """Encodes events in the Confluent framing; decodes them by the registry's schema id."""

    def __init__(
        self,
        ids: SchemaIdSource,
        codec: EventCodec | None = None,
        catalog: SchemaCatalog | None = None,
    ) -> None:
        self.codec = codec or EventCodec.default()
        self.catalog = catalog or self.codec.catalog
        self.ids = ids
        self._id_cache: dict[tuple[str, bytes], bytes] = {}
        self._schema_cache: dict[int, SchemaVersion] = {}

    def encode(self, topic: str, event: Event) -> bytes:
        schema, body = self.codec.encode_body(event)
        key = (value_subject(topic), schema.fingerprint)
        prefix = self._id_cache.get(key)
        if prefix is None:
            schema_id = self.ids.id_for(key[0], schema)
            prefix = self._id_cache[key] = _ID.pack(CONFLUENT_MAGIC, schema_id)
        return prefix + body

    def decode(self, data: bytes) -> Event:
        if len(data) < _ID.size:
            raise TruncatedEventError(f"{len(data)} bytes end inside the 5-byte registry header")
        magic, schema_id = _ID.unpack_from(data)
        if magic != CONFLUENT_MAGIC:
            raise CorruptEventError(f"bad registry magic byte {magic}; expected 0")
        writer = self._schema_cache.get(schema_id)
        if writer is None:
            writer = self._schema_cache[schema_id] = self._catalog_schema(schema_id)
        return self.codec.decode_body(self.codec.read_plan(writer), bytes(data), _ID.size)

    def _catalog_schema(self, schema_id: int) -> SchemaVersion:
        definition = self.ids.schema_for(schema_id)
        _, fingerprint = canonical_fingerprint(definition)
        known = self.catalog.by_fingerprint(fingerprint)
        if known is None:
            raise UnknownSchemaError(
                f"registry schema id {schema_id} (fingerprint {fingerprint.hex()}) is not in the "
                "catalog; upgrade rft to read it"
            )
        return known
