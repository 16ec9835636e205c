"""Tool-call parsers, the `TOOL_CALL_PARSERS` registry: reply text -> `ParsedReply`.

`hermes` reads the Hermes/Qwen format, one JSON object per block:
`<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>`. A reply may
hold several blocks; the text around them is kept as the content. A block that is not a call (bad
JSON, no name, a block never closed) is kept as a `MalformedCall` with the reason, so the model is
told rather than ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from rft.registry import Registry
from rft.tools.calls import MalformedCall, ParsedReply, ToolCall
from rft.tools.json_schema import json_type_name

ToolCallParser = Callable[[str], ParsedReply]

TOOL_CALL_PARSERS: Registry[ToolCallParser] = Registry("tool_call_parser")

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(_OPEN) + r"(.*?)" + re.escape(_CLOSE), re.DOTALL)
_HERMES_FORM = '<tool_call>{"name": "<tool name>", "arguments": {<arguments>}}</tool_call>'


@TOOL_CALL_PARSERS.register("hermes")
def parse_hermes(reply: str) -> ParsedReply:
    """Split `reply` into content and the calls of its `<tool_call>` blocks (see module doc)."""
    content: list[str] = []
    calls: list[ToolCall | MalformedCall] = []
    pos = 0
    for match in _BLOCK.finditer(reply):
        content.append(reply[pos : match.start()])
        calls.append(_read_block(match.group(1), match.group(0), f"call_{len(calls)}"))
        pos = match.end()
    tail = reply[pos:]
    unclosed = tail.find(_OPEN)
    if unclosed >= 0:
        content.append(tail[:unclosed])
        calls.append(
            MalformedCall(
                tail[unclosed:],
                f"the {_OPEN} block is never closed with {_CLOSE}",
                f"call_{len(calls)}",
            )
        )
    else:
        content.append(tail)
    return ParsedReply("".join(content).strip(), tuple(calls))


def _read_block(body: str, text: str, call_id: str) -> ToolCall | MalformedCall:
    try:
        data: Any = json.loads(body)
    except ValueError as exc:
        return MalformedCall(
            text, f"the block is not valid JSON ({exc}); write {_HERMES_FORM}", call_id
        )
    if not isinstance(data, dict):
        return MalformedCall(
            text,
            f"the block must hold one JSON object, not {json_type_name(data)}; write {_HERMES_FORM}",
            call_id,
        )
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return MalformedCall(text, f'the call has no "name" string; write {_HERMES_FORM}', call_id)
    arguments = data.get("arguments", {})
    text_arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(name, text_arguments, call_id)
