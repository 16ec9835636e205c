"""Tools a model calls during a multi-turn rollout: the `TOOLS` and `TOOL_CALL_PARSERS` registries,
the executor that answers calls, the built-in tools and a ChatML chat template with tools.

Importing this package registers the `calculator` and `python` tools and the `hermes` parser. Add a
tool with one decorated function: `@tool("name")` on a function with annotated keyword parameters
(its JSON schema is derived from them, or declared with `parameters=`) and a docstring.
"""

from __future__ import annotations

from rft.tools import calculator, python_tool  # noqa: F401  (registers the built-in tools)
from rft.tools.call_parsers import TOOL_CALL_PARSERS, ToolCallParser
from rft.tools.calls import MalformedCall, ParsedReply, ToolCall
from rft.tools.chat_templates import TOOL_CHAT_TEMPLATES, tool_chat_template
from rft.tools.executor import ToolExecutor, ToolResult
from rft.tools.registry import (
    OUTCOMES,
    TOOLS,
    Tool,
    ToolText,
    make_tool,
    offered_tools,
    tool,
    tool_specs,
)

__all__ = [
    "OUTCOMES",
    "TOOLS",
    "TOOL_CALL_PARSERS",
    "TOOL_CHAT_TEMPLATES",
    "MalformedCall",
    "ParsedReply",
    "Tool",
    "ToolCall",
    "ToolCallParser",
    "ToolExecutor",
    "ToolResult",
    "ToolText",
    "make_tool",
    "offered_tools",
    "tool",
    "tool_chat_template",
    "tool_specs",
]
