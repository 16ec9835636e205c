"""Serve mode's pure parts: requests read or refused with the OpenAI error shape, replies shaped so
that the real `openai` client's own types accept them, and a session's calls turned into
trajectories (concatenated with holed masks, branches as leaves, step-wise steps)."""

from __future__ import annotations

import numpy as np
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from rft.engines.rollout import Rollout
from rft.events.codec import EventCodec
from rft.events.models import ServeCall, ServeChoice
from rft.serve.api_error import ApiError
from rft.serve.replies import (
    Answer,
    assistant_message,
    chat_chunks,
    chat_completion,
    completion_chunks,
    text_completion,
)
from rft.serve.requests import ServeLimits, read_chat, read_completion
from rft.serve.sessions import Session
from rft.tools.call_parsers import TOOL_CALL_PARSERS

LIMITS = ServeLimits(model_name="m", max_completion_tokens=16, max_n=4)
USER = [{"role": "user", "content": "hi"}]


def decode(ids) -> str:
    return "".join(chr(ord("a") + i % 26) for i in ids)


def refusal(body: object, read=read_chat) -> ApiError:
    with pytest.raises(ApiError) as info:
        read(body, LIMITS)
    return info.value


def test_a_chat_request_is_read_into_sampling_settings() -> None:
    read = read_chat(
        {
            "model": "m",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "temperature": 0.5,
            "top_p": 0.9,
            "max_tokens": 7,
            "n": 2,
            "stop": "\n",
            "seed": 3,
            "logprobs": True,
            "top_logprobs": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "metadata": {"session_id": "s", "task_id": "t"},
        },
        LIMITS,
    )
    p = read.params
    assert (p.temperature, p.top_p, p.max_tokens, p.n, p.stop, p.seed) == (
        0.5, 0.9, 7, 2, ("\n",), 3,
    )  # fmt: skip
    assert read.messages == USER and read.logprobs and read.stream and read.include_usage
    assert (read.session_id, read.task_id) == ("s", "t")
    # unset: the API's defaults, and the server's completion limit
    default = read_chat({"model": "m", "messages": USER}, LIMITS).params
    assert (default.temperature, default.top_p, default.n, default.max_tokens) == (1.0, 1.0, 1, 16)


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ([1, 2], 400, None, None),
        ({"messages": USER}, 400, "model", None),
        ({"model": "other", "messages": USER}, 404, "model", "model_not_found"),
        ({"model": "m", "messages": []}, 400, "messages", None),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0]", None),
        ({"model": "m", "messages": USER, "presence_penalty": 0.1}, 400, "presence_penalty",
         "unsupported_parameter"),
        ({"model": "m", "messages": USER, "logprobs": True, "top_logprobs": 2}, 400,
         "top_logprobs", "unsupported_parameter"),
        ({"model": "m", "messages": USER, "tool_choice": "required"}, 400, "tool_choice",
         "unsupported_parameter"),
        ({"model": "m", "messages": USER, "max_tokens": 17}, 400, "max_tokens",
         "max_tokens_exceeded"),
        ({"model": "m", "messages": USER, "n": 5}, 400, "n", None),
        ({"model": "m", "messages": USER, "temperature": 3}, 400, "temperature", None),
        ({"model": "m", "messages": USER, "tools": [{"type": "function"}]}, 400, "tools[0]", None),
    ],
)  # fmt: skip
def test_bad_chat_requests_are_refused_naming_the_parameter(
    body: object, status: int, param: str | None, code: str | None
) -> None:
    error = refusal(body)
    assert (error.status, error.param, error.code) == (status, param, code)
    shaped = error.body()["error"]
    assert shaped["message"] == error.message and shaped["param"] == param
    assert shaped["type"] == ("invalid_request_error" if status < 500 else "server_error")


def test_a_completion_request_takes_text_or_token_ids_and_refuses_the_rest() -> None:
    assert read_completion({"model": "m", "prompt": "hi"}, LIMITS).prompt == "hi"
    assert read_completion({"model": "m", "prompt": [5, 6]}, LIMITS).prompt == [5, 6]
    assert read_completion({"model": "m", "prompt": ["hi"]}, LIMITS).prompt == "hi"
    assert refusal({"model": "m", "prompt": ["a", "b"]}, read_completion).param == "prompt"
    assert refusal({"model": "m", "prompt": "x", "echo": True}, read_completion).param == "echo"
    assert refusal({"model": "m", "prompt": "x", "logprobs": 2}, read_completion).code == (
        "unsupported_parameter"
    )


def rollout(ids: list[int], finish: str = "stop", prompt: list[int] | None = None) -> Rollout:
    return Rollout(
        prompt_ids=np.asarray(prompt or [1, 2], np.int32),
        response_ids=np.asarray(ids, np.int32),
        logprobs=-np.arange(1, len(ids) + 1, dtype=np.float32) / 10,
        text=decode(ids),
        finish_reason=finish,
        logprob_temperature=1.0,
    )


def test_replies_take_the_shapes_the_openai_client_reads() -> None:
    answer = Answer("chatcmpl-1", 1, "m", 7, prompt_tokens=2)
    call = Rollout(
        np.asarray([1], np.int32),
        np.asarray([3, 4], np.int32),
        np.asarray([-0.5, -0.25], np.float32),
        'Let me. <tool_call>{"name": "calculator", "arguments": {"expression": "1+2"}}</tool_call>',
        "stop",
        1.0,
    )
    tool = assistant_message(call, TOOL_CALL_PARSERS.get("hermes"))
    plain = assistant_message(rollout([5, 6, 7], finish="length"), None)
    body = ChatCompletion.model_validate(chat_completion(answer, [tool, plain], True, decode))
    assert body.system_fingerprint == "rft-v7" and body.model_extra == {"model_version": 7}
    first, second = body.choices
    assert first.finish_reason == "tool_calls" and first.message.content == "Let me."
    assert first.message.tool_calls is not None
    (made,) = first.message.tool_calls
    assert made.function.name == "calculator" and made.function.arguments == '{"expression": "1+2"}'
    assert second.finish_reason == "length" and second.message.content == decode([5, 6, 7])
    assert second.logprobs is not None and second.logprobs.content is not None
    assert [t.logprob for t in second.logprobs.content] == pytest.approx([-0.1, -0.2, -0.3])
    assert body.usage is not None and body.usage.completion_tokens == 5

    chunks = [
        ChatCompletionChunk.model_validate(c)
        for c in chat_chunks(answer, [tool, plain], True, True, decode)
    ]
    text = "".join(
        c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == 1
    )
    assert text == decode([5, 6, 7])
    streamed_calls = [
        call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []
    ]
    assert [c.function.name for c in streamed_calls if c.function] == ["calculator"]
    ends = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert ends == ["tool_calls", "length"] and chunks[-1].usage is not None

    done = Completion.model_validate(text_completion(answer, [plain], True, decode))
    assert done.choices[0].text == decode([5, 6, 7])
    assert done.choices[0].logprobs is not None
    assert done.choices[0].logprobs.text_offset == [0, 1, 2]
    # the client builds stream chunks without validating them (their finish_reason is null
    # until the last), so their dicts are read as they are
    pieces = list(completion_chunks(answer, [plain], False, decode))
    assert "".join(p["choices"][0]["text"] for p in pieces) == decode([5, 6, 7])
    assert [p["choices"][0]["finish_reason"] for p in pieces][-1] == "length"


def served(
    call_id: str,
    prompt: list[int],
    replies: list[list[int]],
    parent: tuple[str, int] = ("", -1),
    messages: list[dict] | None = None,
) -> ServeCall:
    choices = tuple(
        ServeChoice(
            np.asarray(r, np.int32),
            -np.arange(1, len(r) + 1, dtype=np.float32),
            decode(r),
            "stop",
            {"role": "assistant", "content": decode(r)},
        )
        for r in replies
    )
    call = ServeCall(
        "s", "", call_id, parent[0], parent[1], "chat.completions",
        {"messages": messages or USER, "tools": None}, np.asarray(prompt, np.int32), choices,
        1.0, 3, "srv",
    )  # fmt: skip
    return EventCodec.default().decode(EventCodec.default().encode(call))  # as read back


def test_a_session_is_one_concatenated_trajectory_per_leaf_with_holed_masks() -> None:
    session = Session("s")
    first = served("c1", [1, 2], [[10, 11], [20]])  # n = 2: two branches
    session.add(first)
    # the next call extends choice 0 with the caller's tokens 5, 6
    assert session.parent_of([1, 2, 10, 11, 5, 6], 1.0) == (first, 0)
    assert session.parent_of([1, 2, 10, 11, 5, 6], 0.7) is None  # another logprob temperature
    assert session.parent_of([1, 2, 99], 1.0) is None
    session.add(served("c2", [1, 2, 10, 11, 5, 6], [[12, 13, 14]], parent=("c1", 0)))
    leaves = session.trajectories(0.5, concatenated=True)
    assert len(leaves) == 2  # c1's choice 1 was never continued: a leaf of its own
    chain = next(t for t in leaves if len(t.response_ids) > 1)
    assert chain.prompt_ids.tolist() == [1, 2]
    assert chain.response_ids.tolist() == [10, 11, 5, 6, 12, 13, 14]
    assert chain.action_mask.tolist() == [1, 1, 0, 0, 1, 1, 1]
    assert chain.logprobs.tolist() == [-1, -2, 0, 0, -1, -2, -3]
    assert {t.reward for t in leaves} == {0.5}
    steps = session.trajectories(1.0, concatenated=False)
    # step-wise: each leaf's path, one step per call
    assert [(t.rollout, t.turn, t.turn_count) for t in steps] == [(0, 0, 1), (1, 0, 2), (1, 1, 2)]
    assert steps[2].prompt_ids.tolist() == [1, 2, 10, 11, 5, 6]
    assert steps[2].action_mask.tolist() == [1, 1, 1]


def test_a_chat_that_repeats_a_reply_is_found_as_its_continuation() -> None:
    session = Session("s")
    first = served("c1", [1, 2], [[10, 11]])
    session.add(first)
    reply = {"role": "assistant", "content": decode([10, 11]), "tool_calls": None}
    more = [*USER, reply, {"role": "user", "content": "and?"}]
    assert session.replied_to(more, None) == (first, 0)
    assert session.replied_to(more, [{"type": "function", "function": {"name": "f"}}]) is None
    changed = [*USER, {"role": "assistant", "content": "not ours"}, more[2]]
    assert session.replied_to(changed, None) is None
    assert session.replied_to([*USER, reply], None) is None  # nothing new to answer


def test_a_session_with_a_call_in_flight_is_neither_closed_nor_expired() -> None:
    """Feedback while one of its calls is still being answered would leave that call out of the
    session's experiences: it is refused (409), and the TTL sweep passes the session by."""
    from rft.consumers.serve.core import ServeCore, ServeSettings

    settings = ServeSettings(
        limits=LIMITS, max_prompt_tokens=64, max_model_len=128, max_sessions=4,
        session_ttl_s=1.0, concatenated=True, group_size=2, server_id="srv",
        explorer_group="g", parse=TOOL_CALL_PARSERS.get("hermes"),
    )  # fmt: skip
    # no engine and no log: neither is reached before the refusal
    core = ServeCore(batcher=None, log_=None, settings=settings)  # type: ignore[arg-type]
    session = Session("s", in_flight=1)
    session.add(served("c1", [1, 2], [[10]]))
    core.sessions["s"] = session
    with pytest.raises(ApiError) as busy:
        core.feedback("s", 1.0, None)
    assert (busy.value.status, busy.value.code) == (409, "session_busy")
    assert core.expire_due(now=session.last_at_ms + 60_000) == []
    with pytest.raises(ApiError) as unknown:
        core.feedback("other", 1.0, None)
    assert (unknown.value.status, unknown.value.code) == (404, "session_not_found")
