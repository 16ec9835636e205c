"""Tool registration: schemas derived from signatures, refused declarations, the validator."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.errors import ConfigError
from rft.registry import Registry
from rft.tools import TOOLS, ToolText, make_tool, tool, tool_specs
from rft.tools.json_schema import check_schema, schema_errors

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3)
    ),
    max_leaves=6,
)


def sample(
    text: Annotated[str, "Some text."],
    count: int,
    mode: Literal["fast", "slow"] = "fast",
    ratio: float = 0.5,
    tags: list[str] | None = None,
    loud: bool = False,
) -> str:
    """Echo the arguments.

    Longer prose that is not part of the description."""
    return f"{text} {count} {mode} {ratio} {tags} {loud}"


def test_schema_is_derived_from_the_signature():
    entry = make_tool("sample", sample)
    assert entry.description == "Echo the arguments."
    params = entry.parameters
    assert params["required"] == ["text", "count"]
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert props["text"] == {"type": "string", "description": "Some text."}
    assert props["count"] == {"type": "integer"}
    assert props["mode"] == {"enum": ["fast", "slow"], "type": "string"}
    assert props["ratio"] == {"type": "number"}
    assert props["tags"] == {"type": ["array", "null"], "items": {"type": "string"}}
    assert props["loud"] == {"type": "boolean"}
    assert entry.spec() == {
        "type": "function",
        "function": {"name": "sample", "description": entry.description, "parameters": params},
    }


def test_decorator_registers_once_and_returns_the_function():
    registry_size = len(TOOLS)

    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    assert tool("test_shout")(shout) is shout
    assert len(TOOLS) == registry_size + 1
    assert tool_specs(["test_shout"])[0]["function"]["name"] == "test_shout"

    def other(text: str) -> str:
        """Another function under the same name."""
        return text

    with pytest.raises(ConfigError, match="already registered"):
        tool("test_shout")(other)
    with pytest.raises(ConfigError, match="did you mean 'test_shout'"):
        tool_specs(["test_shuot"], key="taskset.tools")


def test_builtin_tools_are_registered():
    assert {"calculator", "python"} <= set(TOOLS.names())


def test_declarations_that_would_lie_are_refused():
    def nodoc(x: int) -> int:
        return x

    with pytest.raises(ConfigError, match="docstring"):
        make_tool("nodoc", nodoc)

    def untyped(x) -> str:  # type: ignore[no-untyped-def]
        """Untyped."""
        return str(x)

    with pytest.raises(ConfigError, match="no type annotation"):
        make_tool("untyped", untyped)

    def variadic(*values: int) -> int:
        """Sum."""
        return sum(values)

    with pytest.raises(ConfigError, match="variadic positional"):
        make_tool("variadic", variadic)

    def needs_x(x: int) -> int:
        """Needs x."""
        return x

    with pytest.raises(ConfigError, match="does not accept"):
        make_tool("needs_x", needs_x, parameters={"type": "object", "properties": {"y": {}}})
    with pytest.raises(ConfigError, match="needs x; list it in required"):
        make_tool("needs_x", needs_x, parameters={"type": "object", "properties": {"x": {}}})
    with pytest.raises(ConfigError, match="pattern"):
        make_tool(
            "needs_x",
            needs_x,
            parameters={
                "type": "object",
                "properties": {"x": {"type": "string", "pattern": "a+"}},
                "required": ["x"],
            },
        )

    def odd(x: dict[str, int]) -> str:
        """Odd."""
        return ""

    with pytest.raises(ConfigError, match="no JSON schema form"):
        make_tool("odd", odd)


def test_check_schema_refuses_unknown_types():
    with pytest.raises(ConfigError, match="unknown schema type 'float'"):
        check_schema({"type": "float"}, "where")


@given(
    json_values,
    st.integers(min_value=-50, max_value=50),
    st.integers(min_value=0, max_value=50),
)
def test_integer_bounds_accept_exactly_the_integers_in_range(value, low, width):
    schema = {"type": "integer", "minimum": low, "maximum": low + width}
    fits = isinstance(value, int) and not isinstance(value, bool) and low <= value <= low + width
    assert (schema_errors(schema, value) == []) is fits


@given(json_values, st.lists(st.sampled_from([1, "1", True, None, 2.5]), min_size=1, max_size=3))
def test_enum_matches_json_equality(value, options):
    same = any(
        type(value) is type(o)
        and value == o
        or (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and isinstance(o, int | float)
            and not isinstance(o, bool)
            and value == o
        )
        for o in options
    )
    assert (schema_errors({"enum": options}, value) == []) is same


@given(st.dictionaries(st.sampled_from(["text", "count", "extra"]), json_values, max_size=3))
def test_object_errors_name_each_problem(arguments):
    params = make_tool("sample", sample).parameters
    errors = schema_errors(params, arguments)
    for name in ("text", "count"):
        if name not in arguments:
            assert f"arguments is missing the required property {name!r}" in errors
    if "extra" in arguments:
        assert any("unexpected property 'extra'" in e for e in errors)
    count = arguments.get("count")
    count_ok = isinstance(count, int) and not isinstance(count, bool)
    if isinstance(arguments.get("text"), str) and count_ok and "extra" not in arguments:
        assert errors == []


def test_nested_paths_are_named():
    schema = {"type": "array", "items": {"type": "string", "maxLength": 2}, "maxItems": 2}
    assert schema_errors(schema, ["ab", 3, "abc"]) == [
        "arguments must have at most 2 items, got 3",
        "arguments[1] must be string, got integer 3",
        "arguments[2] must have at most 2 characters, got 3",
    ]


def test_registry_kind_is_the_config_key():
    assert isinstance(TOOLS, Registry)
    assert TOOLS.kind == "tool"


def test_tool_text_carries_a_known_outcome():
    text = ToolText("cut", "truncated")
    assert text == "cut" and text.outcome == "truncated"
    with pytest.raises(ValueError, match="unknown tool outcome 'slow'"):
        ToolText("x", "slow")
