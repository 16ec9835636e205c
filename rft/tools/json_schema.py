"""A small JSON Schema validator for tool arguments: the subset tool schemas here use.

Keywords honoured: `type` (object, string, integer, number, boolean, array, null, or a list of
them), `properties`, `required`, `additionalProperties` (false or a schema), `items`, `enum`,
`minimum`, `maximum`, `minLength`, `maxLength`, `minItems`, `maxItems`. Any other keyword in a
schema is refused when the tool is registered (`check_schema`), so a schema never claims a
constraint that is not enforced. Errors are sentences naming the path of the bad value, because they
are shown to the model as the tool's reply.
"""

from __future__ import annotations

import json
from typing import Any

from rft.errors import ConfigError

SUPPORTED_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
    }
)
_TYPES = ("object", "string", "integer", "number", "boolean", "array", "null")


def check_schema(schema: Any, where: str) -> None:
    """Raise ConfigError naming `where` if `schema` uses a keyword or type this validator lacks."""
    if not isinstance(schema, dict):
        raise ConfigError(f"{where}: a schema must be a JSON object, got {schema!r}")
    unknown = sorted(set(schema) - SUPPORTED_KEYWORDS)
    if unknown:
        raise ConfigError(
            f"{where}: schema keyword(s) {', '.join(unknown)} are not enforced by rft's validator "
            f"(supported: {', '.join(sorted(SUPPORTED_KEYWORDS))})"
        )
    declared = schema.get("type")
    for name in declared if isinstance(declared, list) else [declared] if declared else []:
        if name not in _TYPES:
            raise ConfigError(f"{where}: unknown schema type {name!r} (known: {', '.join(_TYPES)})")
    for prop, sub in (schema.get("properties") or {}).items():
        check_schema(sub, f"{where}.properties.{prop}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            check_schema(schema[key], f"{where}.{key}")


def schema_errors(schema: dict[str, Any], value: Any, path: str = "arguments") -> list[str]:
    """Every way `value` breaks `schema`, one sentence each; empty when it conforms."""
    declared = schema.get("type")
    if declared is not None:
        allowed = declared if isinstance(declared, list) else [declared]
        if not any(_is_type(value, name) for name in allowed):
            return [f"{path} must be {' or '.join(allowed)}, got {_describe(value)}"]
    errors: list[str] = []
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        options = ", ".join(_short(option) for option in schema["enum"])
        errors.append(f"{path} must be one of {options}, got {_short(value)}")
    if _is_number(value):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path} must be at least {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path} must be at most {schema['maximum']}, got {value}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{path} must have at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(
                f"{path} must have at most {schema['maxLength']} characters, got {len(value)}"
            )
    if isinstance(value, list):
        errors.extend(_array_errors(schema, value, path))
    if isinstance(value, dict):
        errors.extend(_object_errors(schema, value, path))
    return errors


def _array_errors(schema: dict[str, Any], value: list[Any], path: str) -> list[str]:
    errors: list[str] = []
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(f"{path} must have at least {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path} must have at most {schema['maxItems']} items, got {len(value)}")
    if isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors.extend(schema_errors(schema["items"], item, f"{path}[{index}]"))
    return errors


def _object_errors(schema: dict[str, Any], value: dict[str, Any], path: str) -> list[str]:
    properties: dict[str, Any] = schema.get("properties") or {}
    errors = [
        f"{path} is missing the required property {name!r}"
        for name in schema.get("required", [])
        if name not in value
    ]
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            errors.extend(schema_errors(properties[name], item, f"{path}.{name}"))
        elif extra is False:
            known = ", ".join(repr(p) for p in properties) or "none"
            errors.append(f"{path} has an unexpected property {name!r} (accepted: {known})")
        elif isinstance(extra, dict):
            errors.extend(schema_errors(extra, item, f"{path}.{name}"))
    return errors


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return _is_number(value)
    python_type = {
        "object": dict,
        "string": str,
        "boolean": bool,
        "array": list,
        "null": type(None),
    }.get(name)
    return python_type is not None and isinstance(value, python_type)


def _same(value: Any, option: Any) -> bool:
    # JSON's true is not 1, though Python's True == 1
    return (
        type(value) is type(option)
        and value == option
        or (_is_number(value) and _is_number(option) and value == option)
    )


_JSON_NAMES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def json_type_name(value: Any) -> str:
    """The JSON name of a decoded value's type: object, array, string, boolean, integer, ..."""
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _describe(value: Any) -> str:
    return f"{json_type_name(value)} {_short(value)}"


def _short(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
