"""Straight-line Avro encoder and decoder for the newest Experience schema, generated from it.

The codec's hot path: Python source is generated from the schema's fields at construction and
compiled, so field order and types always come from the .avsc. Bytes are identical to fastavro's;
anything unusual (unsupported schema shapes, unexpected value types, malformed bytes) raises, and
`EventCodec` then takes its fastavro path, which owns every error type and message.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Encoder = Callable[[dict[str, Any]], bytes]
Decoder = Callable[[bytes, int], dict[str, Any]]

_SMALL = 1 << 14  # varints of up to two bytes come from a table: every length below 8 KiB


class UnsupportedSchemaError(Exception):
    """The schema uses a shape the generator does not handle; use the generic path."""


class Malformed(Exception):
    """The bytes are not a well-formed body the fast decoder accepts."""


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_UVARINT = [_uvarint(z) for z in range(_SMALL)]


def _long_bytes(value: int) -> bytes:
    # Avro longs are int64; anything else goes to fastavro, which rejects it with its own error
    if type(value) is not int or not -(1 << 63) <= value < 1 << 63:
        raise TypeError("not an int64")
    zigzag = (value << 1) ^ (value >> 63)
    return _UVARINT[zigzag] if zigzag < _SMALL else _uvarint(zigzag)


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint at `pos` and the position after it; the one-byte case is inlined."""
    byte = data[pos]
    result = byte & 0x7F
    shift = 7
    while byte & 0x80:
        pos += 1
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        shift += 7
        if shift > 70:
            raise Malformed("varint longer than 10 bytes")
    # a 10th byte can carry bits past 64; fastavro wraps those, so it decides what they mean
    if result >> 64:
        raise Malformed("varint overflows 64 bits")
    return (result >> 1) ^ -(result & 1), pos + 1


def _read_size(data: bytes, pos: int) -> tuple[int, int]:
    """The zigzag-encoded size at `pos`, still encoded, and the position after it."""
    size, pos = _read_long(data, pos)
    if size < 0:
        raise Malformed("negative length")
    return size << 1, pos


_NAMESPACE = {
    "_UVARINT": _UVARINT,
    "_SMALL": _SMALL,
    "_long_bytes": _long_bytes,
    "_uvarint": _uvarint,
    "_read_long": _read_long,
    "_read_size": _read_size,
    "_pack_d": struct.Struct("<d").pack,
    "_pack_f": struct.Struct("<f").pack,
    "_unpack_d": struct.Struct("<d").unpack_from,
    "_unpack_f": struct.Struct("<f").unpack_from,
    "_utf8": str.encode,
    "Malformed": Malformed,
}


@dataclass(frozen=True)
class FastCodec:
    """Generated encode/decode pair for one schema version, plus their source for debugging."""

    encode: Encoder  # record -> header + body
    decode: Decoder  # (data, body start) -> record, or raises on anything unexpected
    source: str


def compile_codec(definition: dict[str, Any], header: bytes) -> FastCodec:
    """Generate the codec for a flat record schema; UnsupportedSchemaError if it is not flat."""
    if not isinstance(definition, dict) or definition.get("type") != "record":
        raise UnsupportedSchemaError("top level is not a record")
    gen = _Generator()
    fields = [(f["name"], _type_of(f["type"])) for f in definition["fields"]]
    enc = ["def encode(r):", "    out = [_HEADER]", "    a = out.append"]
    for name, kind in fields:
        enc.extend(gen.encode_value(f"r[{name!r}]", kind, "    "))
    enc.append("    return b''.join(out)")
    dec = ["def decode(d, p):"]
    names = []
    for name, kind in fields:
        target = gen.fresh("f")
        names.append((name, target))
        dec.extend(gen.decode_value(target, kind, "    "))
    dec.append("    if p != len(d):")
    dec.append("        raise Malformed('trailing bytes')")
    dec.append("    return {" + ", ".join(f"{n!r}: {t}" for n, t in names) + "}")
    source = "\n".join(enc + [""] + dec) + "\n"
    namespace: dict[str, Any] = dict(_NAMESPACE, _HEADER=header)
    exec(compile(source, f"<fast codec {definition.get('name')}>", "exec"), namespace)
    return FastCodec(encode=namespace["encode"], decode=namespace["decode"], source=source)


_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _type_of(schema: Any) -> Any:
    """Normalise a field type: logical types are read as their underlying type."""
    if isinstance(schema, dict) and schema.get("type") in _PRIMITIVES:
        return schema["type"]
    return schema


class _Generator:
    def __init__(self) -> None:
        self._count = 0

    def fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def encode_value(self, expr: str, schema: Any, ind: str) -> list[str]:
        schema = _type_of(schema)
        v = self.fresh("v")
        lines = [f"{ind}{v} = {expr}"]
        if schema == "string":
            b = self.fresh("b")
            lines += [f"{ind}{b} = _utf8({v})", *self._size(b, ind), f"{ind}a({b})"]
        elif schema == "bytes":
            # only exact bytes: len() of another buffer type need not be its byte count
            lines += [
                f"{ind}if type({v}) is not bytes:",
                f"{ind}    raise TypeError('not bytes')",
                *self._size(v, ind),
                f"{ind}a({v})",
            ]
        elif schema in ("int", "long"):
            lines.append(f"{ind}a(_long_bytes({v}))")
        elif schema == "double":
            lines.append(f"{ind}a(_pack_d({v}))")
        elif schema == "float":
            lines.append(f"{ind}a(_pack_f({v}))")
        elif schema == "boolean":
            lines += [
                f"{ind}if {v} is True:",
                f"{ind}    a(b'\\x01')",
                f"{ind}elif {v} is False:",
                f"{ind}    a(b'\\x00')",
                f"{ind}else:",
                f"{ind}    raise TypeError('not a bool')",
            ]
        elif schema == "null":
            lines += [f"{ind}if {v} is not None:", f"{ind}    raise TypeError('not None')"]
        elif isinstance(schema, list):
            null_index, branch = self._optional(schema)
            lines += [
                f"{ind}if {v} is None:",
                f"{ind}    a({_uvarint(null_index << 1)!r})",
                f"{ind}else:",
                f"{ind}    a({_uvarint((1 - null_index) << 1)!r})",
            ]
            lines += self.encode_value(v, branch, ind + "    ")
        elif isinstance(schema, dict) and schema.get("type") == "map":
            values = _type_of(schema["values"])
            if values not in _PRIMITIVES:
                raise UnsupportedSchemaError(f"map of {values!r}")
            k, x = self.fresh("k"), self.fresh("x")
            # one positive-count block then the end marker, as fastavro writes maps
            lines += [
                f"{ind}if type({v}) is not dict:",
                f"{ind}    raise TypeError('not a dict')",
                f"{ind}if {v}:",
                *self._size(v, ind + "    "),
                f"{ind}    for {k}, {x} in {v}.items():",
            ]
            lines += self.encode_value(k, "string", ind + "        ")
            lines += self.encode_value(x, values, ind + "        ")
            lines.append(f"{ind}a(b'\\x00')")
        else:
            raise UnsupportedSchemaError(f"type {schema!r}")
        return lines

    def decode_value(self, target: str, schema: Any, ind: str) -> list[str]:
        schema = _type_of(schema)
        if schema in ("int", "long"):
            return self._read_long(target, ind)
        if schema in ("string", "bytes"):
            x, start = self.fresh("s"), self.fresh("b")
            decode = ".decode()" if schema == "string" else ""
            # A size that runs past the end slices short but leaves p > n, and p only grows, so
            # the final `p != n` check catches it; negative sizes must be caught here.
            # sizes below 8 KiB (one or two varint bytes) are read inline
            return [
                f"{ind}{x} = d[p]",
                f"{ind}if {x} < 0x80:",
                f"{ind}    {start} = p + 1",
                f"{ind}elif d[p + 1] < 0x80:",
                f"{ind}    {x} = ({x} & 0x7F) | (d[p + 1] << 7)",
                f"{ind}    {start} = p + 2",
                f"{ind}else:",
                f"{ind}    {x}, {start} = _read_size(d, p)",
                f"{ind}if {x} & 1:",
                f"{ind}    raise Malformed('negative length')",
                f"{ind}p = {start} + ({x} >> 1)",
                f"{ind}{target} = d[{start}:p]{decode}",
            ]
        if schema in ("double", "float"):
            width = 8 if schema == "double" else 4
            return [f"{ind}{target} = _unpack_{schema[0]}(d, p)[0]", f"{ind}p += {width}"]
        if schema == "boolean":
            return [
                f"{ind}{target} = d[p]",
                f"{ind}if {target} > 1:",
                f"{ind}    raise Malformed('bad boolean')",
                f"{ind}{target} = {target} == 1",
                f"{ind}p += 1",
            ]
        if schema == "null":
            return [f"{ind}{target} = None"]
        if isinstance(schema, list):
            null_index, branch = self._optional(schema)
            index = self.fresh("i")
            return self._read_long(index, ind) + [
                f"{ind}if {index} == {null_index}:",
                f"{ind}    {target} = None",
                f"{ind}elif {index} == {1 - null_index}:",
                *self.decode_value(target, branch, ind + "    "),
                f"{ind}else:",
                f"{ind}    raise Malformed('bad union branch')",
            ]
        if isinstance(schema, dict) and schema.get("type") == "map":
            values = _type_of(schema["values"])
            if values not in _PRIMITIVES:
                raise UnsupportedSchemaError(f"map of {values!r}")
            count, key, value = self.fresh("c"), self.fresh("k"), self.fresh("x")
            ignored = self.fresh("z")
            inner = ind + "        "
            return [
                f"{ind}{target} = {{}}",
                f"{ind}while True:",
                *self._read_long(count, ind + "    "),
                f"{ind}    if {count} == 0:",
                f"{ind}        break",
                f"{ind}    if {count} < 0:",
                f"{ind}        {count} = -{count}",
                *self._read_long(ignored, ind + "        "),
                f"{ind}    for _ in range({count}):",
                *self.decode_value(key, "string", inner),
                *self.decode_value(value, values, inner),
                f"{inner}{target}[{key}] = {value}",
            ]
        raise UnsupportedSchemaError(f"type {schema!r}")

    def _size(self, value: str, ind: str) -> list[str]:
        z = self.fresh("z")
        return [
            f"{ind}{z} = len({value}) << 1",
            f"{ind}a(_UVARINT[{z}] if {z} < _SMALL else _uvarint({z}))",
        ]

    def _read_long(self, target: str, ind: str) -> list[str]:
        # most varints here are lengths and counts under 64: one byte, no call
        return [
            f"{ind}{target} = d[p]",
            f"{ind}if {target} < 0x80:",
            f"{ind}    {target} = ({target} >> 1) ^ -({target} & 1)",
            f"{ind}    p += 1",
            f"{ind}else:",
            f"{ind}    {target}, p = _read_long(d, p)",
        ]

    @staticmethod
    def _optional(schema: list[Any]) -> tuple[int, str]:
        """Null's index and the other branch of a two-branch union with null.

        Other unions need fastavro's branch matching, so they are left to it.
        """
        types = [_type_of(s) for s in schema]
        if len(types) != 2 or "null" not in types or types[0] == types[1]:
            raise UnsupportedSchemaError(f"union {schema!r}")
        null_index = types.index("null")
        branch = types[1 - null_index]
        if branch not in _PRIMITIVES:
            raise UnsupportedSchemaError(f"union {schema!r}")
        return null_index, branch
