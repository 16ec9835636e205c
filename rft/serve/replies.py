"""Engine replies shaped as OpenAI responses: chat completions, text completions, their stream
chunks, and the model list.

`assistant_message` reads a reply for tool calls (a `TOOL_CALL_PARSERS` parser, only when the
request offered tools) and gives the message a caller sends back in its next turn, with the
finish reason: "tool_calls" when it made calls, "length" when the token limit or the call's time
ran out. Every body names the weight version that answered twice: `system_fingerprint`
(`rft-v<version>`, a field the `openai` client types) and `model_version` (rft's own field,
`response.model_extra["model_version"]` in the client).

A stream is the whole reply cut into chunks: the engine generates a batch of replies at once, so
the first chunk comes when the reply is complete. Without tools each token is a chunk (with its
logprob when asked); with tools the content and the calls come as one chunk each.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rft.engines.rollout import Rollout
from rft.tools.calls import ParsedReply, ToolCall

Decode = Callable[[Sequence[int]], str]


@dataclass(frozen=True)
class ShapedChoice:
    """One reply as the caller sees it: the message (or text), finish reason, per-token view."""

    reply: Rollout
    message: dict[str, Any]
    finish_reason: str


def assistant_message(reply: Rollout, parse: Callable[[str], ParsedReply] | None) -> ShapedChoice:
    """The reply as an assistant message; `parse` (None: no tools offered) reads tool calls."""
    finish = "stop" if reply.finish_reason == "stop" else "length"
    if parse is None:
        return ShapedChoice(reply, {"role": "assistant", "content": reply.text}, finish)
    parsed = parse(reply.text)
    calls = [c for c in parsed.calls if isinstance(c, ToolCall)]
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content or None}
    if calls:
        message["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in calls
        ]
        if finish == "stop":
            finish = "tool_calls"
    elif message["content"] is None:
        message["content"] = ""
    return ShapedChoice(reply, message, finish)


def _usage(prompt_tokens: int, choices: Sequence[ShapedChoice]) -> dict[str, int]:
    completion = sum(len(c.reply.response_ids) for c in choices)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
    }


def _token_logprobs(reply: Rollout, decode: Decode) -> list[dict[str, Any]]:
    out = []
    for token, logprob in zip(reply.response_ids.tolist(), reply.logprobs.tolist(), strict=True):
        text = decode([token])
        out.append(
            {
                "token": text,
                "logprob": float(logprob),
                "bytes": list(text.encode("utf-8")),
                "top_logprobs": [],
            }
        )
    return out


@dataclass(frozen=True)
class Answer:
    """What every response of one call shares."""

    call_id: str
    created: int
    model: str
    version: int
    prompt_tokens: int

    def head(self, obj: str) -> dict[str, Any]:
        return {
            "id": self.call_id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": f"rft-v{self.version}",
            "model_version": self.version,
        }


def chat_completion(
    answer: Answer,
    choices: Sequence[ShapedChoice],
    logprobs: bool,
    decode: Decode,
    token_ids: bool = False,
) -> dict[str, Any]:
    return {
        **answer.head("chat.completion"),
        "choices": [
            {
                "index": i,
                "message": choice.message,
                "finish_reason": choice.finish_reason,
                "logprobs": {"content": _token_logprobs(choice.reply, decode)}
                if logprobs
                else None,
                **(_ids(choice) if token_ids else {}),
            }
            for i, choice in enumerate(choices)
        ],
        "usage": _usage(answer.prompt_tokens, choices),
    }


def _ids(choice: ShapedChoice) -> dict[str, list[int]]:
    return {
        "prompt_token_ids": choice.reply.prompt_ids.tolist(),
        "token_ids": choice.reply.response_ids.tolist(),
    }


def text_completion(
    answer: Answer,
    choices: Sequence[ShapedChoice],
    logprobs: bool,
    decode: Decode,
    token_ids: bool = False,
) -> dict[str, Any]:
    out = []
    for i, choice in enumerate(choices):
        entry: dict[str, Any] = {
            "index": i,
            "text": choice.reply.text,
            "finish_reason": choice.finish_reason,
            "logprobs": None,
            **(_ids(choice) if token_ids else {}),
        }
        if logprobs:
            tokens = [decode([t]) for t in choice.reply.response_ids.tolist()]
            offsets, at = [], 0
            for token in tokens:
                offsets.append(at)
                at += len(token)
            entry["logprobs"] = {
                "tokens": tokens,
                "token_logprobs": [float(x) for x in choice.reply.logprobs.tolist()],
                "top_logprobs": None,
                "text_offset": offsets,
            }
        out.append(entry)
    return {
        **answer.head("text_completion"),
        "choices": out,
        "usage": _usage(answer.prompt_tokens, choices),
    }


def chat_chunks(
    answer: Answer,
    choices: Sequence[ShapedChoice],
    logprobs: bool,
    include_usage: bool,
    decode: Decode,
) -> Iterator[dict[str, Any]]:
    """The chat completion as `chat.completion.chunk` objects, choice by choice."""
    head = answer.head("chat.completion.chunk")

    def chunk(index: int, delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
        entry = {"index": index, "delta": delta, "finish_reason": None, "logprobs": None}
        entry.update(extra)
        return {**head, "choices": [entry]}

    for i, choice in enumerate(choices):
        yield chunk(i, {"role": "assistant", "content": ""})
        calls = choice.message.get("tool_calls")
        if calls:
            if choice.message.get("content"):
                yield chunk(i, {"content": choice.message["content"]})
            yield chunk(i, {"tool_calls": [{"index": k, **call} for k, call in enumerate(calls)]})
        else:
            lps = _token_logprobs(choice.reply, decode) if logprobs else None
            for k, piece in enumerate(_pieces(choice.reply.response_ids.tolist(), decode)):
                extra = {"logprobs": {"content": [lps[k]]}} if lps is not None else {}
                yield chunk(i, {"content": piece}, **extra)
        yield chunk(i, {}, finish_reason=choice.finish_reason)
    if include_usage:
        yield {**head, "choices": [], "usage": _usage(answer.prompt_tokens, choices)}


def completion_chunks(
    answer: Answer, choices: Sequence[ShapedChoice], include_usage: bool, decode: Decode
) -> Iterator[dict[str, Any]]:
    head = answer.head("text_completion")
    for i, choice in enumerate(choices):
        for piece in _pieces(choice.reply.response_ids.tolist(), decode):
            yield {**head, "choices": [_text_entry(i, piece, None)]}
        yield {**head, "choices": [_text_entry(i, "", choice.finish_reason)]}
    if include_usage:
        yield {**head, "choices": [], "usage": _usage(answer.prompt_tokens, choices)}


def _text_entry(index: int, text: str, finish: str | None) -> dict[str, Any]:
    return {"index": index, "text": text, "finish_reason": finish, "logprobs": None}


def _pieces(ids: list[int], decode: Decode) -> Iterator[str]:
    """The text each token adds: decoding the prefix each time keeps a character split across
    tokens whole (the chunk that completes it carries it)."""
    before = ""
    for k in range(len(ids)):
        now = decode(ids[: k + 1])
        if now.endswith("\ufffd") and k + 1 < len(ids):
            yield ""  # an incomplete character: the token that ends it carries it
            continue
        yield now[len(before) :]
        before = now


def model_list(name: str, created: int, version: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "rft",
                "model_version": version,
            }
        ],
    }


def sse(obj: dict[str, Any] | str) -> bytes:
    """One server-sent event: `data: <json>` (or the literal `[DONE]`) and a blank line."""
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {data}\n\n".encode()
