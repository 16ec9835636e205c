"""The one wrapper of the `openai` package: calls to an OpenAI-compatible server, and the shapes of
what is sent and read back.

`OpenAIClient` posts `/v1/completions` (a prompt given as token ids, for the `openai` rollout
engine) and `/v1/chat/completions` (for judges and user simulators, which need only the text).
Its failures are `EngineError`s naming the server's URL and, where the server answered, its
status and message; no `openai` exception leaves this module.

The shaping is pure and tested on its own: `completion_body` asks for what training needs (the
choice's `prompt_token_ids` and `token_ids` with vLLM's `return_token_ids`, and `logprobs: 0`,
the sampled token's logprob), and `read_completion` reads each choice back into a
`RemoteReply`, refusing an answer that lacks them. The version that answered is read from the
body's `model_version`, else `system_fingerprint` `rft-v<N>`, else the `X-RFT-Model-Version`
header (rft's serve endpoint says it in all three).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import openai

from rft.errors import EngineError

VERSION_HEADER = "x-rft-model-version"
_FINGERPRINT = re.compile(r"^rft-v(\d+)$")
# the completion fields the `openai` client takes as typed arguments
_TYPED_COMPLETION = frozenset(
    {"model", "prompt", "max_tokens", "n", "temperature", "top_p", "logprobs", "seed", "stop"}
)
# sampling settings the OpenAI API has no field for: sent only when set, under vLLM's names, so a
# server that does not act on them refuses the call (rft's does, with 400) instead of the engine
# dropping them unseen
_EXTRA_SETTINGS = {"top_k": 0, "repetition_penalty": 1.0, "min_tokens": 0, "stop_token_ids": ()}


@dataclass(frozen=True)
class RemoteReply:
    """One choice of an answer: what the server fed its model and what it generated."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str


@dataclass(frozen=True)
class RemoteAnswer:
    """An answer's choices, in order, and the weight version the server says answered it."""

    replies: list[RemoteReply]
    version: int | None


def completion_body(
    model: str, prompt_ids: Sequence[int], settings: Mapping[str, Any]
) -> dict[str, Any]:
    """The `/v1/completions` body for one prompt given as token ids.

    `settings`: temperature, top_p, max_tokens, n, seed, stop, and the extra ones above."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": [int(t) for t in prompt_ids],
        "max_tokens": int(settings["max_tokens"]),
        "n": int(settings.get("n", 1)),
        "temperature": float(settings.get("temperature", 1.0)),
        "top_p": float(settings.get("top_p", 1.0)),
        "logprobs": 0,
        "return_token_ids": True,
    }
    if settings.get("seed") is not None:
        body["seed"] = int(settings["seed"])
    if settings.get("stop"):
        body["stop"] = list(settings["stop"])
    for name, off in _EXTRA_SETTINGS.items():
        value = settings.get(name, off)
        if value != off:
            body[name] = list(value) if isinstance(value, tuple) else value
    return body


def answer_version(body: Mapping[str, Any], headers: Mapping[str, str]) -> int | None:
    """The weight version the server says answered (None: it says none)."""
    version = body.get("model_version")
    if isinstance(version, int) and not isinstance(version, bool):
        return version
    fingerprint = body.get("system_fingerprint")
    if isinstance(fingerprint, str) and (match := _FINGERPRINT.match(fingerprint)):
        return int(match.group(1))
    header = {k.lower(): v for k, v in headers.items()}.get(VERSION_HEADER)
    if header is not None and header.strip().isdigit():
        return int(header.strip())
    return None


def read_completion(
    body: Mapping[str, Any], headers: Mapping[str, str], where: str
) -> RemoteAnswer:
    """A `/v1/completions` answer read into replies; EngineError naming `where` when a choice
    lacks its token ids or logprobs, or they do not line up."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise EngineError(f"{where}: the answer has no choices")
    replies = []
    for choice in sorted(choices, key=lambda c: int(c.get("index", 0))):
        at = f"{where}: choice {choice.get('index', 0)}"
        prompt_ids = _ids(choice.get("prompt_token_ids"), f"{at}: prompt_token_ids")
        response_ids = _ids(choice.get("token_ids"), f"{at}: token_ids")
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if not isinstance(logprobs, list) or not all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in logprobs
        ):
            raise EngineError(f"{at}: the answer carries no token logprobs (send logprobs: 0)")
        if len(logprobs) != len(response_ids):
            raise EngineError(
                f"{at}: {len(logprobs)} logprobs for {len(response_ids)} generated tokens"
            )
        replies.append(
            RemoteReply(
                prompt_ids=prompt_ids,
                response_ids=response_ids,
                logprobs=[float(x) for x in logprobs],
                text=str(choice.get("text") or ""),
                finish_reason=str(choice.get("finish_reason") or "stop"),
            )
        )
    return RemoteAnswer(replies, answer_version(body, headers))


def _ids(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    ):
        raise EngineError(
            f"{where}: missing or not a list of token ids (the server must return token ids: "
            "`return_token_ids`)"
        )
    return value


class OpenAIClient:
    """A client of one OpenAI-compatible server (`base_url` ends in `/v1`)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout_s: float = 600.0,
        max_retries: int = 2,
    ) -> None:
        self.base_url = base_url
        # the `openai` client wants some key; a server without auth ignores an empty one
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "", timeout=timeout_s, max_retries=max_retries
        )

    def completion(
        self, body: Mapping[str, Any], timeout_s: float | None = None
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """POST /v1/completions: the answer's JSON body and its headers. Fields the `openai`
        client does not type (`return_token_ids`, `top_k`, ...) go as its `extra_body`."""
        typed = {k: v for k, v in body.items() if k in _TYPED_COMPLETION}
        extra = {k: v for k, v in body.items() if k not in _TYPED_COMPLETION}
        return self._call(
            "/completions",
            lambda: self._client.completions.with_raw_response.create(
                **typed, extra_body=extra or None, **_timeout(timeout_s)
            ),
        )

    def chat(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        timeout_s: float | None = None,
        **settings: Any,
    ) -> str:
        """POST /v1/chat/completions and the first choice's text: what a judge or a user
        simulator reads. `settings` are the API's (temperature, max_tokens, ...)."""
        answer, _ = self._call(
            "/chat/completions",
            lambda: self._client.chat.completions.with_raw_response.create(
                model=model,
                messages=[dict(m) for m in messages],  # type: ignore[misc]
                **settings,
                **_timeout(timeout_s),
            ),
        )
        try:
            return str(answer["choices"][0]["message"].get("content") or "")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise EngineError(
                f"{self.base_url}/chat/completions: no message in the answer"
            ) from exc

    def close(self) -> None:
        self._client.close()

    def _call(self, path: str, send: Callable[[], Any]) -> tuple[dict[str, Any], dict[str, str]]:
        where = f"{self.base_url}{path}"
        try:
            raw = send()
        except openai.APIStatusError as exc:
            raise EngineError(
                f"{where}: the server answered {exc.status_code}: {_message(exc)}"
            ) from exc
        except openai.APITimeoutError as exc:
            raise EngineError(f"{where}: no answer within the call's timeout") from exc
        except openai.APIConnectionError as exc:
            raise EngineError(f"{where}: cannot reach the server: {exc}") from exc
        except openai.OpenAIError as exc:
            raise EngineError(f"{where}: {exc}") from exc
        try:
            answer = raw.http_response.json()
        except ValueError as exc:
            raise EngineError(f"{where}: the answer is not JSON") from exc
        if not isinstance(answer, dict):
            raise EngineError(f"{where}: the answer is not a JSON object")
        return answer, dict(raw.headers)


def _timeout(timeout_s: float | None) -> dict[str, Any]:
    return {} if timeout_s is None else {"timeout": timeout_s}


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(exc.message)
