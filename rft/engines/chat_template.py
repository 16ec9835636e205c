"""Chat templates a run sets instead of the tokenizer's: `model.custom_chat_template` (the Jinja
text), `model.chat_template_path` (a file holding it), and a taskset's `format.chat_template`.

Templates are checked when the explorer starts, so a typo is a ConfigError naming its key rather
than a failure of every task.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rft.errors import ConfigError, EngineError

if TYPE_CHECKING:
    from rft.engines.rollout import RolloutEngine

_PROBE = [{"role": "user", "content": "u"}]


def configured_chat_template(custom: str | None, path: str | None) -> str | None:
    """The model section's template text: `custom_chat_template`, or the file at
    `chat_template_path`; None when neither is set (the tokenizer's own template is used)."""
    if custom and path:
        raise ConfigError(
            "model.custom_chat_template and model.chat_template_path are both set; set one"
        )
    if not path:
        return custom or None
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"model.chat_template_path: cannot read {file.resolve()}: {exc.strerror or exc}"
        ) from exc
    if not text.strip():
        raise ConfigError(f"model.chat_template_path: {file.resolve()} is empty")
    return text


def check_chat_template(engine: RolloutEngine, template: str, key: str) -> None:
    """Render a one-message chat with `template`; ConfigError naming `key` if it cannot."""
    try:
        engine.chat_prompt_ids(_PROBE, True, template)
    except EngineError as exc:
        raise ConfigError(f"{key}: {exc}") from exc
