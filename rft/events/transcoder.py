"""Each event dataclass's mapping to its Avro record, derived from the newest schema version.

A record class (an event, or a record nested in one) declares its fields once, as dataclass
fields named like the fields of its `.avsc`; `SchemaRecord` gives it construction checks,
`to_record` and `from_record`, generated from those two and nothing else:

- the Avro type of a field and its annotation pick how it is checked and carried: `string` as
  `str`, or as `dict` carried as JSON object text; `int`/`long` with their ranges; `bytes` as
  `bytes` or as a numpy array packed little-endian in the annotation's dtype; maps by value type;
  unions with null as `X | None`; nested records as their own record class, or as a plain tuple
  (`tuple[int, int]`) in field order; arrays as tuples;
- a field the newest schema gives a default is filled with it when a record lacks the field (an
  older reader schema), and the dataclass default must equal it;
- `field(metadata=...)` adds a rule on the value (`at_least`, `one_of`, `FINITE_POSITIVE`),
  checked on construction and on decode; `_invariants` holds rules that span fields.

The functions are generated as straight-line Python and compiled once per class (the codec's hot
path runs them per event). A dataclass and its schema that disagree (a field missing on either
side, a type with no mapping, a differing default) raise RecordDriftError naming the field when
the class is first used.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from rft.events import field_checks as fc
from rft.events.catalog import SchemaCatalog, SchemaCatalogError

RULE = "rft.events.rule"  # the key of a field's value rule in its dataclass metadata


class RecordDriftError(SchemaCatalogError):
    """A record dataclass and its Avro schema disagree on a field."""


def at_least(minimum: int) -> dict[str, Any]:
    """Field metadata: the value (when not None) is >= `minimum`."""

    def rule(event: str, name: str, value: int) -> None:
        if value < minimum:
            raise fc.fail(event, name, f"must be >= {minimum}, got {value}")

    return {RULE: rule}


def one_of(options: tuple[str, ...]) -> dict[str, Any]:
    """Field metadata: the value is one of `options`."""

    def rule(event: str, name: str, value: str) -> None:
        if value not in options:
            raise fc.fail(event, name, f"{value!r} is not one of {options}")

    return {RULE: rule}


FINITE_POSITIVE: dict[str, Any] = {RULE: fc.check_finite_positive}
"""Field metadata: the float is finite and > 0."""


class SchemaRecord:
    """Base of the record dataclasses: checks, `to_record` and `from_record` from the schema."""

    __slots__ = ()
    SCHEMA: ClassVar[str]  # the full Avro record name, e.g. rft.events.Task

    def __post_init__(self) -> None:
        cls = type(self)
        (_BUILT.get(cls) or transcoder_of(cls)).check(self)

    def _invariants(self) -> None:
        """Rules across fields, after the field checks on construction and on decode."""

    def to_record(self) -> dict[str, Any]:
        """The Avro record (a dict) of this event, in the newest schema version."""
        return transcoder_of(type(self)).to_record(self)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        """Build from a decoded Avro record (of any version the newest one reads).

        The record's types are guaranteed by its schema, so only what Avro cannot guarantee is
        checked: int32 ranges, JSON text, packed array sizes, field rules and invariants.
        """
        return typing.cast(Self, transcoder_of(cls).from_record(record))


@dataclass(frozen=True)
class Transcoder:
    """The generated functions of one record class, and their source for debugging."""

    record_type: type
    check: Callable[[Any], None]  # checks and normalises a new instance's fields in place
    to_record: Callable[[Any], dict[str, Any]]
    from_record: Callable[[Mapping[str, Any]], Any]
    source: str


_BUILT: dict[type, Transcoder] = {}


def transcoder_of(cls: type, catalog: SchemaCatalog | None = None) -> Transcoder:
    """The transcoder of record class `cls`, built from the newest schemas of `catalog` (the
    project's own, once per class, when None); RecordDriftError if the two disagree."""
    if catalog is not None:
        return _build(cls, _named_records(catalog), catalog)
    built = _BUILT.get(cls)
    if built is None:
        built = _build(cls, _named_records(SchemaCatalog.default()), None)
        _BUILT[cls] = built
    return built


def _named_records(catalog: SchemaCatalog) -> dict[str, dict[str, Any]]:
    """Every record the newest schema versions define, nested ones included, by full name."""
    found: dict[str, dict[str, Any]] = {}

    def walk(node: Any, namespace: str) -> None:
        if isinstance(node, list):
            for branch in node:
                walk(branch, namespace)
        elif isinstance(node, dict):
            if node.get("type") == "record":
                full = _full_name(node["name"], node.get("namespace", namespace))
                found.setdefault(full, node)
                for item in node["fields"]:
                    walk(item["type"], full.rsplit(".", 1)[0])
            for key in ("items", "values"):
                if key in node:
                    walk(node[key], namespace)

    for name in catalog.names():
        walk(catalog.latest(name).definition, name.rsplit(".", 1)[0])
    return found


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name else f"{namespace}.{name}"


# --- how one field is carried ------------------------------------------------------------------


@dataclass(frozen=True)
class _Form:
    """Expression templates over `{x}` (a local holding the value) for one field.

    check: the checked value (None: nothing to check); accept: a condition under which the value
    needs no check call (None: always call); encode / decode: model value -> Avro value and back
    (None: the same value).
    """

    check: str | None
    accept: str | None = None
    encode: str | None = None
    decode: str | None = None
    names: tuple[tuple[str, Any], ...] = ()


_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_SCALARS = {
    ("string", str): _Form("_check_str(E, {n}, {x})", "type({x}) is str"),
    ("long", int): _Form(
        "_check_int(E, {n}, {x})", f"type({{x}}) is int and {fc.INT64[0]} <= {{x}} <= {fc.INT64[1]}"
    ),
    ("int", int): _Form(
        "_check_int32(E, {n}, {x})",
        f"type({{x}}) is int and {fc.INT32[0]} <= {{x}} <= {fc.INT32[1]}",
        decode=f"{{x}} if {fc.INT32[0]} <= {{x}} <= {fc.INT32[1]} else _out_of_int32(E, {{n}}, {{x}})",
    ),
    ("double", float): _Form("_check_float(E, {n}, {x})", "type({x}) is float"),
    ("float", float): _Form("_check_float(E, {n}, {x})", "type({x}) is float"),
    ("boolean", bool): _Form("_check_bool(E, {n}, {x})", "type({x}) is bool"),
    ("bytes", bytes): _Form("_check_bytes(E, {n}, {x})", "type({x}) is bytes"),
    ("string", dict): _Form(
        "_check_mapping(E, {n}, {x})",
        encode="_json_text(E, {n}, {x})",
        decode="_json_object({n}, {x})",
    ),
}
_MAPS = {
    "string": "_check_str_map(E, {n}, {x})",
    "double": "_check_float_map(E, {n}, {x})",
    "bytes": "_check_bytes_map(E, {n}, {x})",
}
_ARRAYS = {  # packed arrays by element dtype
    fc.ID_DTYPE: _Form(
        "_int_array(E, {n}, {x})",
        encode="_packed({x}, _ID)",
        decode="_frombuffer({x}, dtype=_ID)",
    ),
    fc.FLOAT_DTYPE: _Form(
        "_float_array(E, {n}, {x})",
        encode="_packed({x}, _FLOAT)",
        decode="_frombuffer({x}, dtype=_FLOAT)",
    ),
    fc.MASK_DTYPE: _Form(
        "_mask_array(E, {n}, {x})", encode="{x}.tobytes()", decode="_unpack_mask({n}, {x})"
    ),
}
_NAMESPACE: dict[str, Any] = {
    "_put": object.__setattr__,
    "_new": object.__new__,
    "_frombuffer": np.frombuffer,
    "_ID": fc.ID_DTYPE,
    "_FLOAT": fc.FLOAT_DTYPE,
    "_check_str": fc.check_str,
    "_check_int": fc.check_int,
    "_check_int32": fc.check_int32,
    "_out_of_int32": fc.out_of_int32,
    "_check_float": fc.check_float,
    "_check_bool": fc.check_bool,
    "_check_bytes": fc.check_bytes,
    "_check_mapping": fc.check_mapping,
    "_check_str_map": fc.check_str_map,
    "_check_float_map": fc.check_float_map,
    "_check_bytes_map": fc.check_bytes_map,
    "_check_tuple_of": fc.check_tuple_of,
    "_check_instance": fc.check_instance,
    "_check_rows": fc.check_rows,
    "_json_text": fc.json_text,
    "_json_object": fc.json_object,
    "_int_array": fc.int_array,
    "_float_array": fc.float_array,
    "_mask_array": fc.mask_array,
    "_packed": fc.packed,
    "_unpack_mask": fc.unpack_mask,
}
_COLUMN_CHECKS: dict[tuple[str, type], fc.Check] = {
    ("string", str): fc.check_str,
    ("long", int): fc.check_int,
    ("int", int): fc.check_int32,
    ("double", float): fc.check_float,
    ("boolean", bool): fc.check_bool,
    ("bytes", bytes): fc.check_bytes,
}


class _Mapper:
    """Chooses the form of each field of one record class; names the field when none fits."""

    def __init__(
        self,
        cls: type,
        named: dict[str, dict[str, Any]],
        namespace: str,
        catalog: SchemaCatalog | None,
    ) -> None:
        self.named = named
        self.catalog = catalog
        self.namespace = namespace
        self.count = 0
        self.where = cls.__name__

    def fresh(self) -> str:
        self.count += 1
        return f"_v{self.count}"

    def drift(self, message: str) -> RecordDriftError:
        return RecordDriftError(f"{self.where}: {message}")

    def resolve(self, wire: Any) -> Any:
        """A field type with logical types dropped and named references looked up."""
        if isinstance(wire, dict) and wire.get("type") in _PRIMITIVES:
            return wire["type"]
        if isinstance(wire, str) and wire not in _PRIMITIVES:
            found = self.named.get(_full_name(wire, self.namespace))
            if found is None:
                raise self.drift(f"the schema names an unknown type {wire!r}")
            return found
        return wire

    def form(self, wire: Any, hint: Any) -> _Form:
        wire = self.resolve(wire)
        optional = _optional_hint(hint)
        if optional is not None:
            if isinstance(wire, list):
                branches = [self.resolve(b) for b in wire]
                if len(branches) != 2 or "null" not in branches:
                    raise self.drift(f"union {wire!r} is not a type or null")
                return _nullable(self.form(branches[1 - branches.index("null")], optional))
            # None in the model only: `_invariants` fills the value before it is encoded
            return _nullable(self.form(wire, optional), wire_too=False)
        origin = typing.get_origin(hint) or hint
        args = typing.get_args(hint)
        if isinstance(wire, str):
            scalar = _array_scalar(hint)
            if scalar is not None and wire == "bytes":
                dtype = np.dtype(scalar)
                if dtype in _ARRAYS:
                    return _ARRAYS[dtype]
            elif (wire, origin) in _SCALARS:
                return _SCALARS[wire, origin]
        elif isinstance(wire, list):
            pass  # a union, but the annotation is not `X | None`
        elif wire.get("type") == "map" and origin is dict and len(args) == 2:
            values = self.resolve(wire["values"])
            if isinstance(values, str) and values in _MAPS and (values, args[1]) in _SCALARS:
                return _Form(_MAPS[values])
        elif wire.get("type") == "array" and origin is tuple and len(args) == 2:
            items = self.resolve(wire["items"])
            if args[1] is Ellipsis and isinstance(items, dict) and items["type"] == "record":
                if typing.get_origin(args[0]) is tuple:
                    return self.rows(items, typing.get_args(args[0]))
                return self.record(items, args[0], many=True)
        elif wire.get("type") == "record" and isinstance(hint, type):
            return self.record(wire, hint)
        raise self.drift(f"no mapping of Avro {_describe(wire)} to {hint!r}")

    def record(self, wire: dict[str, Any], kind: Any, *, many: bool = False) -> _Form:
        """A nested record as its own record class `kind`; `many`: an array of them, as a tuple."""
        full = _full_name(wire["name"], wire.get("namespace", self.namespace))
        if getattr(kind, "SCHEMA", None) != full:
            raise self.drift(f"{kind!r} is not the record class of Avro record {full}")
        sub = transcoder_of(kind, self.catalog)
        k, enc, dec = self.fresh(), self.fresh(), self.fresh()
        names = ((k, kind), (enc, sub.to_record), (dec, sub.from_record))
        if many:
            return _Form(
                f"_check_tuple_of(E, {{n}}, {{x}}, {k})",
                encode=f"[{enc}(y) for y in {{x}}]",
                decode=f"tuple([{dec}(y) for y in {{x}}])",
                names=names,
            )
        return _Form(
            f"_check_instance(E, {{n}}, {{x}}, {k})",
            encode=f"{enc}({{x}})",
            decode=f"{dec}({{x}})",
            names=names,
        )

    def rows(self, wire: dict[str, Any], columns: tuple[Any, ...]) -> _Form:
        """An array of records kept as tuples of their fields, in field order."""
        fields = wire["fields"]
        types_ = [self.resolve(f["type"]) for f in fields]
        checks = [
            _COLUMN_CHECKS.get((t, c)) if isinstance(t, str) else None
            for t, c in zip(types_, columns, strict=False)
        ]
        if len(fields) != len(columns) or None in checks:
            raise self.drift(f"no mapping of Avro {wire['name']} records to tuple{list(columns)}")
        names = [f["name"] for f in fields]
        col = self.fresh()
        encode = "{" + ", ".join(f"{n!r}: y[{i}]" for i, n in enumerate(names)) + "}"
        decode = "(" + "".join(f"y[{n!r}], " for n in names) + ")"
        return _Form(
            f"_check_rows(E, {{n}}, {{x}}, {col})",
            encode=f"[{encode} for y in {{x}}]",
            decode=f"tuple([{decode} for y in {{x}}])",
            names=((col, tuple(checks)),),
        )


def _nullable(inner: _Form, *, wire_too: bool = True) -> _Form:
    def either(template: str | None) -> str | None:
        return None if template is None else f"None if {{x}} is None else {template}"

    return _Form(
        check=either(inner.check),
        accept=None if inner.accept is None else f"{{x}} is None or {inner.accept}",
        encode=either(inner.encode) if wire_too else inner.encode,
        decode=either(inner.decode) if wire_too else inner.decode,
        names=inner.names,
    )


def _array_scalar(hint: Any) -> Any:
    """The scalar type of a numpy array annotation (`npt.NDArray[np.int32]` -> np.int32), else
    None. NDArray is `ndarray[shape, dtype[scalar]]` in some numpy versions and a `type` alias
    of it (origin the alias, one argument) in others (2.5 on the GPU machine)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is np.ndarray and len(args) == 2:
        return typing.get_args(args[1])[0]
    aliased = getattr(origin, "__value__", None)
    if aliased is not None and typing.get_origin(aliased) is np.ndarray and len(args) == 1:
        return args[0]
    return None


def _optional_hint(hint: Any) -> Any:
    """X for an `X | None` annotation, else None."""
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0]
    return None


def _describe(wire: Any) -> str:
    if isinstance(wire, dict):
        return f"{wire.get('type')} {wire.get('name', '')}".strip()
    return repr(wire)


# --- code generation ---------------------------------------------------------------------------

_MISSING = object()


def _build(
    cls: type, named: dict[str, dict[str, Any]], catalog: SchemaCatalog | None
) -> Transcoder:
    full = getattr(cls, "SCHEMA", None)
    if not dataclasses.is_dataclass(cls) or not isinstance(full, str):
        raise RecordDriftError(f"{cls.__name__} is not a record dataclass with a SCHEMA name")
    definition = named.get(full)
    if definition is None:
        raise RecordDriftError(f"{cls.__name__}: no schema defines the record {full}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    wire_fields = definition["fields"]
    missing = [f["name"] for f in wire_fields if f["name"] not in fields]
    extra = [name for name in fields if name not in {f["name"] for f in wire_fields}]
    if missing or extra:
        raise RecordDriftError(
            f"{cls.__name__} and its schema {full} differ: fields only in the schema: {missing}; "
            f"only in the dataclass: {extra}"
        )
    hints = typing.get_type_hints(cls)
    mapper = _Mapper(cls, named, full.rsplit(".", 1)[0], catalog)
    namespace = dict(_NAMESPACE, E=cls.__name__, _C=cls)
    check = ["def check(s):", "    put = _put"]
    encode_locals, encode_items = [], []
    decode = ["def from_record(r):", "    put = _put", "    o = _new(_C)"]
    for i, item in enumerate(wire_fields):
        name = item["name"]
        lit = repr(name)
        mapper.where = f"{cls.__name__}.{name}"
        form = mapper.form(item["type"], hints[name])
        namespace.update(form.names)
        rule = fields[name].metadata.get(RULE)
        if rule is not None:
            namespace[f"_rule{i}"] = rule
        # the rule applies to a value, not to an optional field's None
        guard = "if x is not None: " if _optional_hint(hints[name]) is not None else ""
        ruled = f"    {guard}_rule{i}(E, {lit}, x)"

        check.append(f"    x = s.{name}")
        if form.check is not None:
            checked = [f"x = {_subst(form.check, 'x', lit)}", f"put(s, {lit}, x)"]
            if form.accept is not None:
                check.append(f"    if not ({_subst(form.accept, 'x', lit)}):")
                check += [f"        {line}" for line in checked]
            else:
                check += [f"    {line}" for line in checked]
        if rule is not None:
            check.append(ruled)

        if form.encode is None:
            encode_items.append(f"{lit}: s.{name}")
        else:
            encode_locals.append(f"    x{i} = s.{name}")
            encode_items.append(f"{lit}: {_subst(form.encode, f'x{i}', lit)}")

        default = _schema_default(fields[name], item, mapper)
        if default is _MISSING and form.decode is None and rule is None:
            decode.append(f"    put(o, {lit}, r[{lit}])")
            continue
        if default is _MISSING:
            decode.append(f"    x = r[{lit}]")
        elif isinstance(default, dict | list):  # a fresh empty container per event
            decode.append(f"    x = r.get({lit})")
            decode.append(f"    if x is None: x = {default!r}")
        else:
            decode.append(f"    x = r.get({lit}, {default!r})")
        if form.decode is not None:
            decode.append(f"    x = {_subst(form.decode, 'x', lit)}")
        if rule is not None:
            decode.append(ruled)
        decode.append(f"    put(o, {lit}, x)")
    invariants = cls._invariants is not SchemaRecord._invariants  # type: ignore[attr-defined]
    if invariants:
        check.append("    s._invariants()")
        decode.append("    o._invariants()")
    decode.append("    return o")
    encode = ["def to_record(s):", *encode_locals, "    return {" + ", ".join(encode_items) + "}"]
    source = "\n".join(check + [""] + encode + [""] + decode) + "\n"
    exec(compile(source, f"<transcoder {full}>", "exec"), namespace)
    return Transcoder(
        record_type=cls,
        check=namespace["check"],
        to_record=namespace["to_record"],
        from_record=namespace["from_record"],
        source=source,
    )


def _subst(template: str, value: str, name: str) -> str:
    return template.replace("{x}", value).replace("{n}", name)


def _schema_default(field: dataclasses.Field[Any], item: dict[str, Any], mapper: _Mapper) -> Any:
    """The newest schema's default of a field (_MISSING if none); the dataclass must agree."""
    if "default" not in item:
        return _MISSING
    default = item["default"]
    if not (
        default is None or isinstance(default, bool | int | float | str) or default in ({}, [])
    ):
        raise mapper.drift(f"default {default!r:.40} is not a scalar or an empty container")
    if field.default is not dataclasses.MISSING:
        mine = field.default
    elif field.default_factory is not dataclasses.MISSING:
        mine = field.default_factory()
    else:
        raise mapper.drift(f"the schema's default is {default!r} but the dataclass has none")
    if type(mine) is not type(default) or mine != default:
        raise mapper.drift(f"the schema's default is {default!r}, the dataclass's {mine!r}")
    return default
