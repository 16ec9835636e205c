"""The tool registry, `TOOLS`: a tool is one function registered with one decorator, `@tool(...)`.

A `Tool` holds the function, its description (the docstring's first paragraph unless given) and the
JSON schema of its keyword arguments (derived from the signature, or declared with `parameters=`).
`tool_specs` lists tools in the OpenAI shape that chat templates offer to the model:
`[{"type": "function", "function": {"name", "description", "parameters"}}]`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rft.errors import ConfigError
from rft.registry import Registry, unknown_arguments
from rft.tools.json_schema import check_schema
from rft.tools.signature_schema import signature_schema

F = TypeVar("F", bound=Callable[..., Any])

# How a call ended, as counted in metrics (see rft.tools.executor).
OUTCOMES = (
    "ok",
    "truncated",
    "malformed_call",
    "unknown_tool",
    "invalid_arguments",
    "tool_error",
    "timeout",
)


class ToolText(str):
    """Text a tool returns together with its outcome, for a tool that enforces limits of its own
    (the `python` tool says "timeout" at its wall-clock or CPU limit, "truncated" at its output
    limit). A plain str result counts as "ok"."""

    outcome: str

    def __new__(cls, text: str, outcome: str) -> ToolText:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown tool outcome {outcome!r} (known: {', '.join(OUTCOMES)})")
        made = super().__new__(cls, text)
        made.outcome = outcome
        return made


@dataclass(frozen=True)
class Tool:
    """A callable offered to the model: `fn(**arguments)` returns the result (str or JSON data).

    `check_ready` is run when a config selects the tool; it raises ConfigError with a sentence when
    the tool cannot work on this machine (the `python` tool needs OS limits, for example).
    """

    name: str
    fn: Callable[..., Any]
    description: str
    parameters: dict[str, Any]
    check_ready: Callable[[], None] | None = field(default=None, compare=False)

    def spec(self) -> dict[str, Any]:
        """The OpenAI-style function spec of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


TOOLS: Registry[Tool] = Registry("tool")


def tool(
    name: str,
    *,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    check_ready: Callable[[], None] | None = None,
    replace: bool = False,
) -> Callable[[F], F]:
    """Decorator registering the function in `TOOLS` under `name`; it returns the function as is."""

    def decorate(fn: F) -> F:
        TOOLS.add(
            name,
            make_tool(name, fn, description, parameters, check_ready),
            replace=replace,
        )
        return fn

    return decorate


def make_tool(
    name: str,
    fn: Callable[..., Any],
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    check_ready: Callable[[], None] | None = None,
) -> Tool:
    """A `Tool` for `fn`, with its schema checked against the signature it will be called with."""
    where = f"tool {name!r}"
    text = description if description is not None else _doc_summary(fn)
    if not text:
        raise ConfigError(f"{where}: give it a docstring or description=; the model reads it")
    if parameters is None:
        parameters = signature_schema(fn, where)
    check_schema(parameters, f"{where} parameters")
    if parameters.get("type") != "object":
        raise ConfigError(f"{where}: parameters must be an object schema (type: object)")
    declared = list((parameters.get("properties") or {}).keys())
    unknown, accepted = unknown_arguments(fn, declared)
    if unknown:
        raise ConfigError(
            f"{where}: schema declares {', '.join(unknown)}, which the function does not accept "
            f"(it accepts: {', '.join(accepted) or 'nothing'})"
        )
    missing = [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.name not in parameters.get("required", [])
    ]
    if missing:
        raise ConfigError(f"{where}: the function needs {', '.join(missing)}; list it in required")
    return Tool(name, fn, text, parameters, check_ready)


def offered_tools(names: Iterable[str], *, key: str = "tool") -> list[Tool]:
    """The registered tools `names`, in order; ConfigError naming `key` for an unknown name or a
    tool that cannot run on this machine (its `check_ready` fails)."""
    tools = []
    for name in names:
        entry = TOOLS.get(name, key=key)
        if entry.check_ready is not None:
            entry.check_ready()
        tools.append(entry)
    return tools


def tool_specs(names: Iterable[str], *, key: str = "tool") -> list[dict[str, Any]]:
    """The OpenAI-style specs of the registered tools `names` (checked as `offered_tools` does)."""
    return [entry.spec() for entry in offered_tools(names, key=key)]


def _doc_summary(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())
