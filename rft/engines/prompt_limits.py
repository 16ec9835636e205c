"""Token limits of a rollout: `model.max_prompt_tokens`, `model.enable_prompt_truncation` and
`model.max_model_len`.

An over-long prompt keeps its last `max_prompt_tokens` tokens (vLLM's `truncate_prompt_tokens`,
which Trinity-RFT uses for this key, does the same): the model continues from the end of a prompt,
where the generation prompt, the reply prefix and the latest turn of the conversation are, while
what is dropped (the start of the system prompt or of a long chat) is what the reply depends on
least. The generation prompt and reply prefix must survive whole; a prompt that cannot keep them
is refused instead. Responses are then clamped so that prompt + response fit `max_model_len`.

A multi-turn workflow's turn (`turn_params`) is held to the same limits, but its prompt is the
conversation so far, whose start is the trajectory being built: it is never truncated. A turn
whose prompt is over `max_prompt_tokens`, or leaves no room for a reply within `max_model_len`,
is refused, and the workflow ends the trajectory there, marked truncated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rft.errors import TasksetError

if TYPE_CHECKING:
    from rft.engines.rollout import RolloutEngine, SamplingParams


class PromptTooLongError(TasksetError):
    """A task's prompt does not fit the model's limits and cannot be truncated to fit."""


@dataclass(frozen=True)
class PromptLimits:
    """The model section's token limits, as the explorer enforces them."""

    max_prompt_tokens: int
    max_model_len: int
    truncate: bool = True

    def fit(self, prompt: Sequence[int], protected_tail: int) -> list[int]:
        """`prompt`, or its last `max_prompt_tokens` tokens when it is longer and truncation is on.

        `protected_tail`: how many final tokens (generation prompt, reply prefix) must be kept.
        Raises PromptTooLongError when truncation is off or would cut into the protected tail.
        """
        ids = list(prompt)
        limit = self.max_prompt_tokens
        if len(ids) <= limit:
            return ids
        if not self.truncate:
            raise PromptTooLongError(
                f"prompt is {len(ids)} tokens, over model.max_prompt_tokens ({limit}), and "
                "model.enable_prompt_truncation is false"
            )
        if protected_tail > limit:
            raise PromptTooLongError(
                f"prompt is {len(ids)} tokens, over model.max_prompt_tokens ({limit}), and cannot "
                f"be truncated: its generation prompt and reply prefix alone are {protected_tail}"
            )
        return ids[len(ids) - limit :]

    def response_params(self, prompt_len: int, params: SamplingParams) -> SamplingParams:
        """`params` with max_tokens (and min_tokens) clamped so that prompt + response fit
        model.max_model_len; PromptTooLongError when no response token fits."""
        room = self.max_model_len - prompt_len
        if room < 1:
            raise PromptTooLongError(
                f"prompt is {prompt_len} tokens, leaving no room for a response within "
                f"model.max_model_len ({self.max_model_len})"
            )
        if params.max_tokens <= room:
            return params
        return dataclasses.replace(params, max_tokens=room, min_tokens=min(params.min_tokens, room))

    def turn_params(self, prompt_len: int, params: SamplingParams) -> SamplingParams:
        """A multi-turn turn's `params`, its reply clamped to fit model.max_model_len;
        PromptTooLongError when its prompt (the whole conversation so far) is over
        model.max_prompt_tokens or leaves no room for a reply."""
        if prompt_len > self.max_prompt_tokens:
            raise PromptTooLongError(
                f"the conversation is {prompt_len} tokens, over model.max_prompt_tokens "
                f"({self.max_prompt_tokens})"
            )
        return self.response_params(prompt_len, params)


def generation_prompt_len(
    engine: RolloutEngine, messages: Sequence[dict[str, str]], chat_template: str | None
) -> int:
    """Tokens the chat template adds at the end for the assistant's turn (0 if it adds none)."""
    opened = engine.chat_prompt_ids(messages, True, chat_template)
    closed = engine.chat_prompt_ids(messages, False, chat_template)
    shared = 0
    for a, b in zip(opened, closed, strict=False):
        if a != b:
            break
        shared += 1
    return len(opened) - shared
