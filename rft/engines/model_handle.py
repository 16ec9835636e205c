"""`ModelHandle`: the port through which a workflow that drives the model turn by turn reaches
the rollout engine.

A multi-turn workflow asks for one turn at a time: the token ids it feeds (the trajectory so far,
`Trajectory.token_ids`, plus what the environment said) and the sampling settings; it gets the
engine's replies with their token ids and logprobs back, so a trajectory is built from the ids the
model saw and produced, never by tokenizing text again. Many workflow instances hold handles at
once; an engine that batches (`rft.engines.request_batcher`) gathers their concurrent requests into
batched `generate` calls, so a step of many multi-turn rollouts makes about one call per turn.

The port lives with the engines because both sides of it are here or above: the engines implement
it (`request_batcher.BatchedModelHandle`) and wrap it (`openai_facade`), the workflows hold it and
`rft.workflows.model_handle` has its plain implementations. This module imports no engine at run
time (workflows are loaded where torch never is).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rft.engines.rollout import Rollout, SamplingParams

Message = Mapping[str, Any]


class ModelHandle(Protocol):
    """One workflow instance's way to the policy being explored with."""

    @property
    def tokenizer(self) -> Any:
        """The engine's tokenizer (for rendering chats and reading ids)."""
        ...

    @property
    def model_version(self) -> int:
        """The weight version now answering (it may change between turns under fully_async)."""
        ...

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> list[Rollout]:
        """`params.n` replies to one prompt, each with its ids, logprobs and finish reason."""
        ...

    def chat_ids(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Token ids of `messages` rendered by `chat_template` (else the engine's), offering
        `tools` (OpenAI-style specs) where the template has a tools section."""
        ...
