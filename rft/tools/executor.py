"""Running a model's tool calls: `ToolExecutor.execute(call) -> ToolResult`, which never raises.

Every way a call can go wrong becomes a tool message telling the model what went wrong, with an
outcome label for metrics (`OUTCOMES`): a block that was not a call (`malformed_call`), an unknown
or not-offered tool (`unknown_tool`, with the closest name), arguments that are not a JSON object or
break the tool's schema (`invalid_arguments`), a tool that raises (`tool_error`), one that runs past
the timeout (`timeout`), and output longer than the limit (`truncated`, cut with a note). A tool with
limits of its own names its outcome by returning a `ToolText`.

A tool that times out is abandoned on its daemon thread, not killed: Python cannot stop a thread, so
a tool that may run long must bound itself (the `python` tool kills its subprocess at its own
wall-clock limit).
"""

from __future__ import annotations

import difflib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rft.errors import ConfigError
from rft.tools.calls import MalformedCall, ToolCall
from rft.tools.json_schema import json_type_name, schema_errors
from rft.tools.registry import OUTCOMES, Tool, ToolText, offered_tools

__all__ = ["OUTCOMES", "ToolExecutor", "ToolResult"]


@dataclass(frozen=True)
class ToolResult:
    """The reply to one call: the text the model reads and the outcome label counted in metrics."""

    call_id: str
    name: str
    content: str
    outcome: str

    def message(self) -> dict[str, Any]:
        """The result as a chat message of role `tool`."""
        return {
            "role": "tool",
            "name": self.name,
            "tool_call_id": self.call_id,
            "content": self.content,
        }


class ToolExecutor:
    """Runs calls to the tools offered to one workflow; `offering(names)` looks them up in `TOOLS`.

    `timeout_s` bounds each call; `max_result_chars` bounds the text the model gets back.
    """

    def __init__(
        self,
        tools: Sequence[Tool],
        *,
        timeout_s: float = 30.0,
        max_result_chars: int = 8000,
    ) -> None:
        if timeout_s <= 0 or max_result_chars <= 0:
            raise ConfigError(
                f"tool executor: timeout_s ({timeout_s}) and max_result_chars "
                f"({max_result_chars}) must be positive"
            )
        self.tools: dict[str, Tool] = {entry.name: entry for entry in tools}
        self.timeout_s = timeout_s
        self.max_result_chars = max_result_chars

    @classmethod
    def offering(
        cls,
        names: Sequence[str],
        *,
        key: str = "tools",
        timeout_s: float = 30.0,
        max_result_chars: int = 8000,
    ) -> ToolExecutor:
        """An executor for the registered tools `names` (see `offered_tools` for the checks)."""
        tools = offered_tools(names, key=key)
        return cls(tools, timeout_s=timeout_s, max_result_chars=max_result_chars)

    def execute(self, call: ToolCall | MalformedCall) -> ToolResult:
        """The tool message answering `call`, whatever the call and the tool do."""
        if isinstance(call, MalformedCall):
            return ToolResult(
                call.call_id,
                "",
                f"Error: the tool call could not be read: {call.reason}.",
                "malformed_call",
            )
        entry = self.tools.get(call.name)
        if entry is None:
            return ToolResult(call.call_id, call.name, self._unknown(call.name), "unknown_tool")
        try:
            arguments = json.loads(call.arguments)
        except ValueError as exc:
            return self._bad_arguments(call, f"they are not valid JSON ({exc})")
        if not isinstance(arguments, dict):
            kind = json_type_name(arguments)
            return self._bad_arguments(call, f"they must be a JSON object, not {kind}")
        problems = schema_errors(entry.parameters, arguments)
        if problems:
            return self._bad_arguments(call, "; ".join(problems))
        return self._run(entry, call, arguments)

    def _unknown(self, name: str) -> str:
        offered = sorted(self.tools)
        close = difflib.get_close_matches(name, offered, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        return (
            f"Error: there is no tool named {name!r}{hint} "
            f"Available tools: {', '.join(offered) or 'none'}."
        )

    def _bad_arguments(self, call: ToolCall, why: str) -> ToolResult:
        schema = json.dumps(self.tools[call.name].parameters, ensure_ascii=False)
        text = f"Error: wrong arguments for tool {call.name!r}: {why}. Its parameters: {schema}"
        return ToolResult(call.call_id, call.name, text, "invalid_arguments")

    def _run(self, entry: Tool, call: ToolCall, arguments: dict[str, Any]) -> ToolResult:
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = entry.fn(**arguments)
            except BaseException as exc:  # a tool's SystemExit must not end the step
                box["error"] = exc

        worker = threading.Thread(target=target, name=f"tool-{entry.name}", daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            text = (
                f"Error: tool {entry.name!r} did not finish within {self.timeout_s:g} s "
                "and was abandoned; try a smaller input."
            )
            return ToolResult(call.call_id, entry.name, text, "timeout")
        if "error" in box:
            exc = box["error"]
            text = f"Error: tool {entry.name!r} failed: {type(exc).__name__}: {exc}"
            return ToolResult(call.call_id, entry.name, self._cut(text)[0], "tool_error")
        try:
            value = box["value"]
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            text = (
                f"Error: tool {entry.name!r} returned a {type(box['value']).__name__}, "
                "which is neither text nor JSON."
            )
            return ToolResult(call.call_id, entry.name, text, "tool_error")
        cut, truncated = self._cut(text)
        own = value.outcome if isinstance(value, ToolText) else "ok"
        return ToolResult(call.call_id, entry.name, cut, "truncated" if truncated else own)

    def _cut(self, text: str) -> tuple[str, bool]:
        if len(text) <= self.max_result_chars:
            return text, False
        rest = len(text) - self.max_result_chars
        note = f"\n[tool output truncated: {rest} more characters not shown]"
        return text[: self.max_result_chars] + note, True
