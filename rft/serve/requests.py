"""OpenAI-style request bodies read into what the engine needs, or refused with an `ApiError`.

`read_chat` and `read_completion` take the decoded JSON body of `/v1/chat/completions` and
`/v1/completions`. Every parameter read is acted on; any other one is refused with 400 naming it
(`unsupported_parameter`), so a caller never believes a setting took effect when it did not.
`top_logprobs` above 0 (chat) and `logprobs` above 0 (completions) are refused: the engine reports
the sampled token's logprob, not the alternatives. `return_token_ids` (vLLM's name) asks for each
choice's `prompt_token_ids` and `token_ids`, exactly what the engine was fed and generated.
vLLM's extra sampling settings `top_k`, `min_tokens`, `repetition_penalty` and `stop_token_ids`
are read too (the `openai` rollout engine sends them when set). Sampling defaults are the API's (temperature
1, top_p 1, n 1); `max_tokens` defaults to, and may not exceed, `ServeLimits.max_completion_tokens`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rft.engines.rollout import SamplingParams
from rft.serve.api_error import ApiError, bad_request

_ROLES = ("system", "user", "assistant", "tool")
_COMMON = frozenset(
    {"model", "temperature", "top_p", "n", "stop", "seed", "stream", "stream_options"}
    | {"max_tokens", "metadata", "return_token_ids"}
    | {"top_k", "min_tokens", "repetition_penalty", "stop_token_ids"}  # vLLM's extra settings
)
_CHAT = _COMMON | {
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_completion_tokens",
    "logprobs",
    "top_logprobs",
}
_COMPLETION = _COMMON | {"prompt", "logprobs", "echo"}


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask for; `model_name` is the one model served."""

    model_name: str
    max_completion_tokens: int
    max_n: int


@dataclass(frozen=True)
class CompletionRequest:
    """A request read: chat (`messages`, `tools`) or text (`prompt` as text or token ids)."""

    endpoint: str  # "chat.completions" | "completions"
    params: SamplingParams
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    prompt: str | list[int] | None = None
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    return_token_ids: bool = False  # each choice carries its prompt's and its reply's token ids
    session_id: str | None = None  # from metadata; a header wins (rft.consumers.serve.app)
    task_id: str | None = None


def read_chat(body: Any, limits: ServeLimits) -> CompletionRequest:
    body = _object(body)
    _known(body, _CHAT)
    _model(body, limits)
    messages = _messages(body.get("messages"))
    tools = _tools(body.get("tools"))
    choice = body.get("tool_choice")
    if choice not in (None, "auto"):
        raise _unsupported("tool_choice", "only 'auto' is served: the model decides")
    if body.get("parallel_tool_calls") not in (None, True):
        raise _unsupported("parallel_tool_calls", "every call block of a reply is returned")
    logprobs = _flag(body, "logprobs")
    top = body.get("top_logprobs")
    if top is not None:
        if not _is_int(top) or top < 0 or top > 20:
            raise bad_request("top_logprobs must be an integer in [0, 20]", "top_logprobs")
        if top > 0:
            raise _unsupported(
                "top_logprobs", "the engine reports the sampled token's logprob only; send 0"
            )
        if not logprobs:
            raise bad_request("top_logprobs needs logprobs: true", "top_logprobs")
    limit_key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    stream, usage = _stream(body)
    session, task = _metadata(body)
    return CompletionRequest(
        "chat.completions",
        _params(body, limits, limit_key),
        messages=messages,
        tools=tools,
        stream=stream,
        include_usage=usage,
        logprobs=logprobs,
        return_token_ids=_flag(body, "return_token_ids"),
        session_id=session,
        task_id=task,
    )


def read_completion(body: Any, limits: ServeLimits) -> CompletionRequest:
    body = _object(body)
    _known(body, _COMPLETION)
    _model(body, limits)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and not _is_int(prompt[0]):
        prompt = prompt[0]  # a batch of one prompt
    if isinstance(prompt, str):
        if not prompt:
            raise bad_request("prompt is empty", "prompt")
    elif isinstance(prompt, list) and prompt and all(_is_int(t) and t >= 0 for t in prompt):
        prompt = [int(t) for t in prompt]
    elif isinstance(prompt, list) and len(prompt) > 1:
        raise _unsupported("prompt", "one prompt per request (a string or a list of token ids)")
    else:
        raise bad_request("prompt must be a non-empty string or list of token ids", "prompt")
    if body.get("echo") not in (None, False):
        raise _unsupported("echo", "the prompt is not echoed")
    logprobs = body.get("logprobs")
    if logprobs is not None and (not _is_int(logprobs) or not 0 <= logprobs <= 5):
        raise bad_request("logprobs must be an integer in [0, 5]", "logprobs")
    if logprobs:
        raise _unsupported(
            "logprobs", "the engine reports the sampled token's logprob only; send 0"
        )
    stream, usage = _stream(body)
    session, task = _metadata(body)
    return CompletionRequest(
        "completions",
        _params(body, limits, "max_tokens"),
        prompt=prompt,
        stream=stream,
        include_usage=usage,
        logprobs=logprobs == 0,
        return_token_ids=_flag(body, "return_token_ids"),
        session_id=session,
        task_id=task,
    )


# ---- pieces ----


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def _known(body: Mapping[str, Any], allowed: frozenset[str]) -> None:
    for name in sorted(body):
        if name not in allowed and body[name] is not None:
            raise _unsupported(name, "this server does not act on it")


def _unsupported(param: str, why: str) -> ApiError:
    return bad_request(
        f"parameter {param!r} is not supported: {why}", param, "unsupported_parameter"
    )


def _model(body: Mapping[str, Any], limits: ServeLimits) -> None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("model is required (a string)", "model")
    if model != limits.model_name:
        raise ApiError(
            404,
            f"The model {model!r} does not exist; this server serves {limits.model_name!r}",
            param="model",
            code="model_not_found",
        )


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise bad_request("messages must be a non-empty list", "messages")
    out = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise bad_request(f"{where} must be an object", where)
        role = message.get("role")
        if role not in _ROLES:
            raise bad_request(f"{where}.role must be one of {list(_ROLES)}, got {role!r}", where)
        content = message.get("content")
        if isinstance(content, list):  # content parts: only text ones can be rendered
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                raise _unsupported(f"{where}.content", "only text content parts are served")
            message = {**message, "content": "".join(str(p.get("text", "")) for p in content)}
        elif content is not None and not isinstance(content, str):
            raise bad_request(f"{where}.content must be a string", where)
        elif content is None and not message.get("tool_calls"):
            raise bad_request(f"{where}.content is required", where)
        out.append({k: v for k, v in message.items() if v is not None})
    return out


def _tools(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise bad_request("tools must be a list", "tools")
    for i, tool in enumerate(value):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type") != "function"
            or not isinstance(fn, dict)
            or not isinstance(fn.get("name"), str)
        ):
            raise bad_request(
                f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}",
                f"tools[{i}]",
            )
    return [dict(t) for t in value] or None


def _flag(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f"{name} must be a boolean", name)
    return value


def _stream(body: Mapping[str, Any]) -> tuple[bool, bool]:
    stream = _flag(body, "stream")
    if stream and _flag(body, "return_token_ids"):
        raise _unsupported("return_token_ids", "token ids come with whole answers, not streams")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not stream:
        raise bad_request("stream_options needs stream: true", "stream_options")
    if not isinstance(options, dict) or set(options) - {"include_usage"}:
        raise _unsupported("stream_options", "only include_usage is served")
    return stream, _flag(options, "include_usage")


def _metadata(body: Mapping[str, Any]) -> tuple[str | None, str | None]:
    meta = body.get("metadata")
    if meta is None:
        return None, None
    if not isinstance(meta, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        raise bad_request("metadata must map strings to strings", "metadata")
    return meta.get("session_id") or None, meta.get("task_id") or None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(body: Mapping[str, Any], name: str, low: float, high: float, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise bad_request(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}", name)
    return float(value)


def _params(body: Mapping[str, Any], limits: ServeLimits, limit_key: str) -> SamplingParams:
    temperature = _number(body, "temperature", 0.0, 2.0, 1.0)
    top_p = _number(body, "top_p", 0.0, 1.0, 1.0)
    if top_p == 0.0:
        raise bad_request("top_p must be > 0", "top_p")
    n = body.get("n", 1)
    if n is None:
        n = 1
    if not _is_int(n) or not 1 <= n <= limits.max_n:
        raise bad_request(f"n must be an integer in [1, {limits.max_n}], got {n!r}", "n")
    max_tokens = body.get(limit_key)
    if max_tokens is None:
        max_tokens = limits.max_completion_tokens
    if not _is_int(max_tokens) or max_tokens < 1:
        raise bad_request(f"{limit_key} must be a positive integer", limit_key)
    if max_tokens > limits.max_completion_tokens:
        raise bad_request(
            f"{limit_key} {max_tokens} is over this server's limit of "
            f"{limits.max_completion_tokens} completion tokens",
            limit_key,
            "max_tokens_exceeded",
        )
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (
        not isinstance(stop, list)
        or len(stop) > 4
        or not all(isinstance(s, str) and s for s in stop)
    ):
        raise bad_request("stop must be a string or a list of up to 4 non-empty strings", "stop")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise bad_request("seed must be an integer", "seed")
    top_k = body.get("top_k")
    if top_k is not None and (not _is_int(top_k) or top_k < -1):
        raise bad_request("top_k must be an integer >= -1 (-1 or 0: off)", "top_k")
    min_tokens = body.get("min_tokens")
    if min_tokens is not None and (not _is_int(min_tokens) or not 0 <= min_tokens <= max_tokens):
        raise bad_request(f"min_tokens must be an integer in [0, {max_tokens}]", "min_tokens")
    penalty = _number(body, "repetition_penalty", 0.0, 2.0, 1.0)
    if penalty == 0.0:
        raise bad_request("repetition_penalty must be > 0", "repetition_penalty")
    stop_ids = body.get("stop_token_ids")
    if stop_ids is not None and (
        not isinstance(stop_ids, list) or not all(_is_int(t) and t >= 0 for t in stop_ids)
    ):
        raise bad_request("stop_token_ids must be a list of token ids", "stop_token_ids")
    return SamplingParams(
        temperature=temperature,
        top_p=top_p,
        max_tokens=int(max_tokens),
        n=int(n),
        seed=None if seed is None else int(seed) % (1 << 63),
        stop=tuple(stop or ()),
        top_k=max(0, int(top_k or 0)),
        min_tokens=int(min_tokens or 0),
        repetition_penalty=penalty,
        stop_token_ids=tuple(int(t) for t in stop_ids or ()),
    )
