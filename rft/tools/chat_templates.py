"""Chat templates that offer tools, `TOOL_CHAT_TEMPLATES`: name -> Jinja file shipped here.

`smollm2_tools` is ChatML as SmolLM2-Instruct writes it (the same text for system, user and
assistant messages when no tools are given) plus a tools section in the system turn, assistant tool
calls as `<tool_call>` blocks (what the `hermes` parser reads) and tool results as
`<tool_response>` blocks in a user turn. A run selects it like any template, e.g. `model.chat_template_path` set to `tool_chat_template_path("smollm2_tools")`.
"""

from __future__ import annotations

from pathlib import Path

from rft.registry import Registry

_HERE = Path(__file__).with_name("templates")

TOOL_CHAT_TEMPLATES: Registry[Path] = Registry("tool_chat_template")
TOOL_CHAT_TEMPLATES.add("smollm2_tools", _HERE / "smollm2_tools.jinja")


def tool_chat_template_path(name: str) -> Path:
    """The file of the registered template `name`."""
    return TOOL_CHAT_TEMPLATES.get(name)


def tool_chat_template(name: str) -> str:
    """The Jinja text of the registered template `name`."""
    return tool_chat_template_path(name).read_text(encoding="utf-8")
