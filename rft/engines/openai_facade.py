"""An OpenAI-style chat client over a model handle, so workflow code written against the OpenAI
API runs inside a workflow, and what it did stays available as exact token ids.

`OpenAIClient(model, params).chat.completions.create(messages=..., tools=..., ...)` renders the
chat with the handle's chat template (offering `tools`), asks the handle (a batching one gathers
it with other instances' requests) and answers with objects that carry the OpenAI SDK's attribute
names: `choices[i].message.content` / `.tool_calls[j].function.name|arguments`,
`choices[i].finish_reason`, `usage`. Replies are read for tool calls by a `TOOL_CALL_PARSERS`
parser (`hermes` by default) only when tools were offered. Every call is kept in
`client.history` as a `ChatTurn`: the prompt ids the engine was fed and each reply's ids and
logprobs (the engine's `Rollout`), from which a workflow builds its trajectories without
tokenizing text again.

Differences from the OpenAI service, said here because its callers cannot see them: `model` is
accepted and not acted on (the handle's policy answers); finish_reason "length" also covers a
reply the rollout deadline cut short (the turn's `Rollout.finish_reason` says "timeout"); a
malformed tool-call block is left out of `tool_calls` and listed in the message's
`malformed_tool_calls` (rft's own attribute) with the reason. Other request arguments (stream,
logprobs, penalties, ...) are refused with an error naming them.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rft.engines.rollout import Rollout, SamplingParams
from rft.errors import EngineError
from rft.tools.call_parsers import TOOL_CALL_PARSERS
from rft.tools.calls import MalformedCall, ToolCall

if TYPE_CHECKING:
    from rft.engines.model_handle import ModelHandle

_ids = itertools.count()
_ids_lock = threading.Lock()


@dataclass(frozen=True)
class Function:
    name: str
    arguments: str  # JSON text, as the OpenAI API gives it


@dataclass(frozen=True)
class ChatCompletionMessageToolCall:
    id: str
    function: Function
    type: str = "function"


@dataclass(frozen=True)
class ChatCompletionMessage:
    content: str | None
    role: str = "assistant"
    tool_calls: list[ChatCompletionMessageToolCall] | None = None
    malformed_tool_calls: tuple[MalformedCall, ...] = ()

    def model_dump(self) -> dict[str, Any]:
        """The message as a chat entry (what `messages.append(message)` in OpenAI code sends)."""
        entry: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            entry["tool_calls"] = [
                {
                    "id": call.id,
                    "type": call.type,
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
                for call in self.tool_calls
            ]
        return entry


@dataclass(frozen=True)
class Choice:
    index: int
    message: ChatCompletionMessage
    finish_reason: str  # "stop" | "length" | "tool_calls"


@dataclass(frozen=True)
class CompletionUsage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass(frozen=True)
class ChatCompletion:
    id: str
    choices: list[Choice]
    created: int
    model: str
    usage: CompletionUsage
    object: str = "chat.completion"


@dataclass(frozen=True)
class ChatTurn:
    """One `create` call: the chat and tools it rendered, the ids fed, the replies returned."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    prompt_ids: list[int]
    replies: list[Rollout]  # one per choice: response ids, logprobs, engine finish reason
    params: SamplingParams


@dataclass
class _Completions:
    client: OpenAIClient

    def create(self, *, messages: Sequence[Any], **kwargs: Any) -> ChatCompletion:
        return self.client._create(messages, **kwargs)


@dataclass
class _Chat:
    completions: _Completions


_ARGS = frozenset(
    {"model", "tools", "temperature", "top_p", "max_tokens", "max_completion_tokens", "n", "stop"}
    | {"seed", "tool_choice"}
)


@dataclass
class OpenAIClient:
    """`client.chat.completions.create(...)` over `model` (see module doc).

    `params` are the sampling settings a call starts from (the rollout's: its temperature,
    max_tokens, seed); the call's own arguments replace them.
    """

    model: ModelHandle
    params: SamplingParams
    chat_template: str | None = None
    tool_call_parser: str = "hermes"
    model_name: str = "rft-policy"
    history: list[ChatTurn] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._parse = TOOL_CALL_PARSERS.get(self.tool_call_parser)
        self.chat = _Chat(_Completions(self))

    def _create(self, messages: Sequence[Any], **kwargs: Any) -> ChatCompletion:
        unknown = sorted(set(kwargs) - _ARGS)
        if unknown:
            raise EngineError(
                f"chat.completions.create: argument(s) {unknown} not supported here; "
                f"supported: messages, {', '.join(sorted(_ARGS))}"
            )
        if kwargs.get("tool_choice") not in (None, "auto"):
            raise EngineError(
                f"chat.completions.create: tool_choice {kwargs['tool_choice']!r} not supported "
                "(only 'auto': the model decides)"
            )
        chat = [_as_entry(m) for m in messages]
        tools = [dict(t) for t in kwargs.get("tools") or []] or None
        params = self._params(kwargs)
        prompt = self.model.chat_ids(chat, tools=tools, chat_template=self.chat_template)
        replies = self.model.generate(prompt, params)
        self.history.append(ChatTurn(chat, tools, list(prompt), list(replies), params))
        with _ids_lock:
            number = next(_ids)
        return ChatCompletion(
            id=f"chatcmpl-rft-{number}",
            choices=[self._choice(i, r, tools is not None) for i, r in enumerate(replies)],
            created=int(time.time()),
            model=self.model_name,
            usage=CompletionUsage(
                prompt_tokens=len(prompt),
                completion_tokens=sum(len(r.response_ids) for r in replies),
                total_tokens=len(prompt) + sum(len(r.response_ids) for r in replies),
            ),
        )

    def _params(self, kwargs: Mapping[str, Any]) -> SamplingParams:
        changes: dict[str, Any] = {}
        for name in ("temperature", "top_p", "n", "seed"):
            if kwargs.get(name) is not None:
                changes[name] = kwargs[name]
        limit = kwargs.get("max_completion_tokens", kwargs.get("max_tokens"))
        if limit is not None:
            changes["max_tokens"] = int(limit)
        stop = kwargs.get("stop")
        if stop is not None:
            changes["stop"] = (stop,) if isinstance(stop, str) else tuple(stop)
        return dataclasses.replace(self.params, **changes)

    def _choice(self, index: int, reply: Rollout, tools_offered: bool) -> Choice:
        finish = "stop" if reply.finish_reason == "stop" else "length"
        if not tools_offered:
            return Choice(index, ChatCompletionMessage(reply.text), finish)
        parsed = self._parse(reply.text)
        calls = [
            ChatCompletionMessageToolCall(call.call_id, Function(call.name, call.arguments))
            for call in parsed.calls
            if isinstance(call, ToolCall)
        ]
        malformed = tuple(call for call in parsed.calls if isinstance(call, MalformedCall))
        if calls and finish == "stop":
            finish = "tool_calls"
        message = ChatCompletionMessage(
            content=parsed.content or (None if calls else ""),
            tool_calls=calls or None,
            malformed_tool_calls=malformed,
        )
        return Choice(index, message, finish)


def _as_entry(message: Any) -> dict[str, Any]:
    """A chat entry from a dict or an SDK-shaped message object (one with `model_dump`)."""
    if isinstance(message, Mapping):
        return dict(message)
    dump = getattr(message, "model_dump", None)
    if callable(dump):
        return dict(dump())
    raise EngineError(
        f"chat.completions.create: a message must be a dict or a message object, got "
        f"{type(message).__name__}"
    )
