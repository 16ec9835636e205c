"""The plain implementations of the `ModelHandle` port (`rft.engines.model_handle`).

`DirectModelHandle`: each request is one engine call of its own.
`LimitedModelHandle` holds every turn of another handle to the model's prompt limits.

This module imports no engine at run time (workflows are loaded where torch never is).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rft.engines.model_handle import Message, ModelHandle

if TYPE_CHECKING:
    from rft.engines.prompt_limits import PromptLimits
    from rft.engines.rollout import Rollout, RolloutEngine, SamplingParams


class DirectModelHandle:
    """A `ModelHandle` whose every request is one `engine.generate` call of its own."""

    def __init__(self, engine: RolloutEngine) -> None:
        self._engine = engine

    @property
    def tokenizer(self) -> Any:
        return self._engine.tokenizer

    @property
    def model_version(self) -> int:
        return self._engine.model_version

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> list[Rollout]:
        return self._engine.generate([list(prompt_ids)], params)[0]

    def chat_ids(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        return chat_ids(
            self._engine,
            messages,
            tools=tools,
            chat_template=chat_template,
            add_generation_prompt=add_generation_prompt,
        )


class LimitedModelHandle:
    """`inner`, with each request held to `limits` (`PromptLimits.turn_params`): the reply
    clamped so that prompt + reply fit model.max_model_len, and a prompt over
    model.max_prompt_tokens, or with no room left for a reply, refused with PromptTooLongError
    before any engine sees it (the engine would fail on it, or make a sequence the trainer
    cannot take)."""

    def __init__(self, inner: ModelHandle, limits: PromptLimits) -> None:
        self._inner = inner
        self._limits = limits

    @property
    def tokenizer(self) -> Any:
        return self._inner.tokenizer

    @property
    def model_version(self) -> int:
        return self._inner.model_version

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> list[Rollout]:
        return self._inner.generate(prompt_ids, self._limits.turn_params(len(prompt_ids), params))

    def chat_ids(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        return self._inner.chat_ids(
            messages,
            tools=tools,
            chat_template=chat_template,
            add_generation_prompt=add_generation_prompt,
        )


def chat_ids(
    engine: RolloutEngine,
    messages: Sequence[Message],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    chat_template: str | None = None,
    add_generation_prompt: bool = True,
) -> list[int]:
    """`engine.chat_prompt_ids`, with `tools` passed to the template when there are any."""
    return engine.chat_prompt_ids(messages, add_generation_prompt, chat_template, tools=tools)
