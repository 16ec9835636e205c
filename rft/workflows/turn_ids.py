"""`environment_ids`: the token ids that follow a model turn when the environment or tools answer.

A concatenated trajectory is built from ids, never by re-tokenizing the model's text: the model's
turns are the ids the engine returned; what comes between them is taken from the chat template's
rendering of the conversation. The exact way (`"prefix"`) renders the whole conversation with the
new messages and a generation prompt and keeps what follows the ids so far, when the rendering
starts with them. A template need not render the model's turn as the model wrote it (its reply
re-tokenized differently, tool calls re-written from parsed JSON, text around them trimmed); then
(`"rerendered"`) the delta is taken between two renderings that share the re-rendered turn (the
conversation through the model's turn, without, and with the new messages), and the ids that close
the model's turn in the template (e.g. `<|im_end|>\\n`) are put first, less those the model already
wrote. Either way the model's next turn is generated from exactly the ids built here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rft.errors import RftError
from rft.workflows.model_handle import Message, ModelHandle


@dataclass(frozen=True)
class EnvironmentIds:
    """The ids to append and how they were found ("prefix" or "rerendered")."""

    ids: list[int]
    how: str


class TemplateDriftError(RftError):
    """The chat template renders a conversation so that no delta of ids can be taken."""


def environment_ids(
    model: ModelHandle,
    so_far: Sequence[int],
    through_model: Sequence[Message],
    new: Sequence[Message],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    chat_template: str | None = None,
) -> EnvironmentIds:
    """Ids of `new` (environment / tool messages) plus the next generation prompt, to follow
    `so_far` (the trajectory's ids, ending with the model's turn, the last of `through_model`)."""
    so_far = list(so_far)
    after = model.chat_ids(
        [*through_model, *new], tools=tools, chat_template=chat_template, add_generation_prompt=True
    )
    if after[: len(so_far)] == so_far:
        return EnvironmentIds(after[len(so_far) :], "prefix")
    before = model.chat_ids(
        through_model, tools=tools, chat_template=chat_template, add_generation_prompt=False
    )
    if after[: len(before)] != before:
        raise TemplateDriftError(
            "the chat template renders earlier turns differently once new messages follow; "
            "no environment ids can be appended"
        )
    return EnvironmentIds(_turn_closer(model, before, so_far) + after[len(before) :], "rerendered")


def _turn_closer(model: ModelHandle, rendered: list[int], so_far: list[int]) -> list[int]:
    """The ids the template ends a model turn with (after its last end-of-turn token, which is
    included unless the model's turn already ends with it); [] when the template has none."""
    eos = getattr(model.tokenizer, "eos_token_id", None)
    if eos is None or eos not in rendered:
        return []
    last = len(rendered) - 1 - rendered[::-1].index(eos)
    closer = rendered[last:]
    if so_far and so_far[-1] == eos:
        closer = closer[1:]
    return closer
