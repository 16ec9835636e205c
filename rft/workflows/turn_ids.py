"""`environment_ids`: the token ids that follow a model turn when the environment or tools answer.

A concatenated trajectory is built from ids, never by re-tokenizing the model's text: the model's
turns are the ids the engine returned; what comes between them is taken from the chat template's
rendering of the conversation. The exact way (`"prefix"`) renders the whole conversation with the
new messages and a generation prompt and keeps what follows the ids so far, when the rendering
starts with them. A template need not render the model's turn as the model wrote it (its reply
re-tokenized differently, tool calls re-written from parsed JSON, text around them trimmed); then
(`"rerendered"`) the delta is taken between two renderings that share the re-rendered turn (the
conversation through the model's turn, without, and with the new messages), after the ids that
close a model turn in the template (`turn_closer`), less those the sequence already ends with (a
model that stopped at its end of turn, or at the next turn's start where that is its eos). Either
way the model's next turn is generated from exactly the ids built here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rft.engines.model_handle import Message, ModelHandle
from rft.errors import RftError


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
    tail = turn_closer(model, chat_template) + after[len(before) :]
    return EnvironmentIds(tail[_overlap(so_far, tail) :], "rerendered")


def turn_closer(model: ModelHandle, chat_template: str | None = None) -> list[int]:
    """The ids the template ends a model turn with (e.g. `<|im_end|>` and a newline): the
    common tail of two renderings that differ only in the assistant's one-letter reply."""
    ends = [
        model.chat_ids(
            [{"role": "user", "content": "?"}, {"role": "assistant", "content": letter}],
            chat_template=chat_template,
            add_generation_prompt=False,
        )
        for letter in ("A", "B")
    ]
    n = 0
    while n < min(map(len, ends)) and ends[0][-1 - n] == ends[1][-1 - n]:
        n += 1
    return ends[0][len(ends[0]) - n :]


def _overlap(so_far: list[int], tail: list[int]) -> int:
    """How many ids at the start of `tail` the sequence already ends with: a model that stopped
    after writing its turn's end (and, where its eos is the next turn's start, that too) wrote
    them itself."""
    for k in range(min(len(so_far), len(tail)), 0, -1):
        if so_far[-k:] == tail[:k]:
            return k
    return 0
