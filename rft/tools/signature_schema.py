"""The JSON schema of a tool's arguments, derived from its Python signature.

Each keyword parameter becomes a property: `str` -> string, `int` -> integer, `float` -> number
(ints accepted), `bool` -> boolean, `list[X]` -> array of X, `Literal[...]` -> enum, `X | None` ->
X or null. `Annotated[T, "text"]` gives the property its description. Parameters without a default
are required; unknown properties are refused (`additionalProperties: false`) because the function
would reject them anyway.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

from rft.errors import ConfigError

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def signature_schema(fn: Callable[..., Any], where: str) -> dict[str, Any]:
    """An object schema for `fn`'s keyword parameters; ConfigError naming `where` for a parameter
    whose annotation has no JSON form (or that is positional-only or variadic)."""
    hints = typing.get_type_hints(fn, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise ConfigError(
                f"{where}: parameter {name!r} is {param.kind.description}; tool arguments "
                "are passed by keyword, so declare `parameters=` or make it a plain parameter"
            )
        if name not in hints:
            raise ConfigError(f"{where}: parameter {name!r} has no type annotation")
        properties[name] = annotation_schema(hints[name], f"{where}: parameter {name!r}")
        if param.default is inspect.Parameter.empty:
            required.append(name)
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def annotation_schema(annotation: Any, where: str) -> dict[str, Any]:
    """The schema of one annotation (see the module docstring for the forms understood)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        schema = annotation_schema(args[0], where)
        notes = [a for a in args[1:] if isinstance(a, str)]
        if notes:
            schema["description"] = " ".join(notes)
        return schema
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    if origin is typing.Literal:
        kinds = {type(a) for a in args}
        schema = {"enum": list(args)}
        if len(kinds) == 1 and next(iter(kinds)) in _SCALARS:
            schema["type"] = _SCALARS[next(iter(kinds))]
        return schema
    if origin is list:
        if not args:
            return {"type": "array"}
        return {"type": "array", "items": annotation_schema(args[0], where)}
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) == 1 and len(args) == 2:
            inner = annotation_schema(members[0], where)
            if isinstance(inner.get("type"), str):
                inner["type"] = [inner["type"], "null"]
                return inner
    raise ConfigError(
        f"{where}: annotation {annotation!r} has no JSON schema form here "
        "(use str, int, float, bool, list[...], Literal[...], X | None, or declare `parameters=`)"
    )
