"""The chat models an auxiliary model is built as (`rft.engines.auxiliary_models`), one per kind
of engine; ROLLOUT_ENGINES entries name theirs in their `auxiliary` trait.

- `engine_chat_model` (hf, vllm): an engine of its own, loaded from the auxiliary model's
  `model_path` in the explorer's process, whose chat is rendered with its chat template and
  generated in one call. Calls take turns (one at a time on the engine); the time a call waits for
  its turn counts toward its timeout, and a reply the deadline cut short is a timeout, not an
  answer. Its weights are the ones it was loaded with: nothing loads a version into it.
- `server_chat_model` (openai): a client of an OpenAI-compatible server (`base_url`, `api_key`
  else $OPENAI_API_KEY, `engine_args.model`), asked with `/v1/chat/completions`. Only the text is
  read, so any server answers, not only one that returns token ids. No retries: a failed call is
  the caller's to handle (a judge reward falls back).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rft.engines.auxiliary_models import AuxiliarySpec, ChatModel, Message
from rft.engines.rollout import RolloutEngine, SamplingParams, create_rollout_engine
from rft.errors import ConfigError, EngineError

if TYPE_CHECKING:  # the `openai` package is optional: imported only for an openai model
    from rft.engines.openai_client import OpenAIClient


class EngineChat:
    """Chats answered by an engine of the auxiliary model's own."""

    def __init__(self, engine: RolloutEngine) -> None:
        self.engine = engine
        self._turn = threading.Lock()

    def chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        temperature: float,
        timeout_s: float | None,
    ) -> str:
        started = time.monotonic()
        ids = self.engine.chat_prompt_ids(messages)
        if not self._turn.acquire(timeout=-1 if timeout_s is None else timeout_s):
            raise EngineError(f"no turn on the engine within {timeout_s:g} s")
        try:
            left = None if timeout_s is None else timeout_s - (time.monotonic() - started)
            if left is not None and left <= 0:
                raise EngineError(f"no answer within {timeout_s:g} s")
            params = SamplingParams(temperature=temperature, max_tokens=max_tokens, timeout_s=left)
            (reply,) = self.engine.generate([ids], params)[0]
        finally:
            self._turn.release()
        if reply.finish_reason == "timeout":
            raise EngineError(f"no whole answer within {timeout_s:g} s")
        return reply.text

    def close(self) -> None:
        """Nothing to release beyond what garbage collection frees."""


def engine_chat_model(spec: AuxiliarySpec) -> ChatModel:
    """The `auxiliary` factory of the hf and vllm entries."""
    engine = create_rollout_engine(spec.engine_type, spec.engine)
    engine.set_chat_template(spec.chat_template, enable_thinking=spec.enable_thinking)
    return EngineChat(engine)


class ServerChat:
    """Chats answered by an OpenAI-compatible server."""

    def __init__(self, client: OpenAIClient, model: str) -> None:
        self._client = client
        self._model = model

    def chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        temperature: float,
        timeout_s: float | None,
    ) -> str:
        return self._client.chat(
            self._model,
            messages,
            timeout_s=timeout_s,
            max_tokens=max_tokens,
            temperature=temperature,
        )

    def close(self) -> None:
        self._client.close()


def server_chat_model(spec: AuxiliarySpec) -> ChatModel:
    """The `auxiliary` factory of the openai entry."""
    from rft.engines.openai_client import OpenAIClient
    from rft.engines.openai_engine import API_KEY_ENV, DEFAULT_MODEL

    options = spec.engine.options
    base_url = options.get("base_url")
    if not isinstance(base_url, str) or not base_url:
        raise ConfigError("base_url: is required by engine_type openai")
    api_key = options.get("api_key") or os.environ.get(API_KEY_ENV)
    client = OpenAIClient(base_url.rstrip("/"), api_key, max_retries=0)
    return ServerChat(client, str(options.get("model") or DEFAULT_MODEL))
