"""The shapes of tool calls read from a model reply: `ToolCall`, `MalformedCall`, `ParsedReply`.

A parser (rft.tools.call_parsers) turns reply text into a `ParsedReply`; the executor
(rft.tools.executor) turns each of its calls, well-formed or not, into a tool message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """One call as the model wrote it. `arguments` is JSON text, as in OpenAI's API, so a call
    whose arguments are not valid JSON still reaches the executor and gets a reply."""

    name: str
    arguments: str
    call_id: str

    def openai_form(self) -> dict[str, Any]:
        """The call in the OpenAI `tool_calls` shape; arguments stay text when not a JSON object."""
        try:
            arguments: Any = json.loads(self.arguments)
        except ValueError:
            arguments = self.arguments
        if not isinstance(arguments, dict):
            arguments = self.arguments
        return {
            "id": self.call_id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }


@dataclass(frozen=True)
class MalformedCall:
    """A call block that could not be read as a call: its text and a sentence saying why."""

    text: str
    reason: str
    call_id: str


@dataclass(frozen=True)
class ParsedReply:
    """A reply split into its content (the text outside call blocks) and its calls, in order."""

    content: str
    calls: tuple[ToolCall | MalformedCall, ...]

    @property
    def has_calls(self) -> bool:
        return bool(self.calls)

    def assistant_message(self) -> dict[str, Any]:
        """The reply as a chat message: content plus the well-formed calls as `tool_calls`."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        calls = [call.openai_form() for call in self.calls if isinstance(call, ToolCall)]
        if calls:
            message["tool_calls"] = calls
        return message
