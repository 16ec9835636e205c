"""The OpenAI-style client over a model handle: SDK-shaped answers from the real tiny engine with
the exact ids recorded; tool calls read by the hermes parser only when tools were offered; a
tool-call conversation rendered through the tools template; unsupported arguments refused."""

from __future__ import annotations

import json

import pytest

from rft.engines.openai_facade import OpenAIClient
from rft.engines.rollout import SamplingParams
from rft.errors import EngineError
from rft.tools.chat_templates import tool_chat_template_path
from rft.workflows.model_handle import DirectModelHandle
from tests.unit.test_request_batcher import tiny_engine
from tests.unit.test_workflows import CannedEngine

CALC = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "arithmetic",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "17*23"}}</tool_call>'
TEMPLATE = tool_chat_template_path("smollm2_tools").read_text(encoding="utf-8")


def test_answers_in_the_sdk_shape_and_records_the_exact_ids() -> None:
    handle = DirectModelHandle(tiny_engine())
    client = OpenAIClient(handle, SamplingParams(temperature=1.0, max_tokens=64, seed=5))
    chat = [{"role": "user", "content": "hello there"}]
    answer = client.chat.completions.create(
        model="anything", messages=chat, max_tokens=5, n=2, temperature=0.0
    )
    assert answer.object == "chat.completion" and len(answer.choices) == 2
    (turn,) = client.history
    assert turn.prompt_ids == handle.chat_ids(chat)
    assert turn.params.max_tokens == 5 and turn.params.greedy and turn.params.seed == 5
    for choice, reply in zip(answer.choices, turn.replies, strict=True):
        assert choice.message.role == "assistant"
        assert choice.message.content == reply.text
        assert choice.message.tool_calls is None
        assert 0 < len(reply.response_ids) <= 5
        assert len(reply.logprobs) == len(reply.response_ids)
        assert choice.finish_reason == ("stop" if reply.finish_reason == "stop" else "length")
        assert list(reply.prompt_ids) == turn.prompt_ids
    produced = sum(len(r.response_ids) for r in turn.replies)
    assert answer.usage.prompt_tokens == len(turn.prompt_ids)
    assert answer.usage.completion_tokens == produced
    assert answer.usage.total_tokens == len(turn.prompt_ids) + produced


def test_tool_calls_are_parsed_only_when_tools_are_offered() -> None:
    engine = CannedEngine({"391": ["It is 391."], "17 times 23": [f"Let me compute.{CALL}"]})
    client = OpenAIClient(DirectModelHandle(engine), SamplingParams(), chat_template=TEMPLATE)
    chat: list[object] = [{"role": "user", "content": "What is 17 times 23?"}]
    plain = client.chat.completions.create(messages=chat)
    assert plain.choices[0].message.content == f"Let me compute.{CALL}"
    assert plain.choices[0].message.tool_calls is None
    assert plain.choices[0].finish_reason == "stop"

    offered = client.chat.completions.create(messages=chat, tools=[CALC])
    choice = offered.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me compute."
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "calculator"
    assert json.loads(call.function.arguments) == {"expression": "17*23"}
    assert "calculator" in engine.tokenizer.decode(client.history[1].prompt_ids)

    # the OpenAI way on: the message object goes back into the chat, then the tool's result
    chat += [choice.message, {"role": "tool", "tool_call_id": call.id, "content": "391"}]
    final = client.chat.completions.create(messages=chat, tools=[CALC])
    assert final.choices[0].message.content == "It is 391."
    assert final.choices[0].finish_reason == "stop"
    fed = engine.tokenizer.decode(client.history[2].prompt_ids)
    assert "17*23" in fed and "391" in fed
    assert client.history[2].messages[1]["tool_calls"][0]["function"]["name"] == "calculator"


def test_a_malformed_call_is_listed_with_its_reason() -> None:
    engine = CannedEngine({"": ['<tool_call>{"name": "calculator", </tool_call>']})
    client = OpenAIClient(DirectModelHandle(engine), SamplingParams(), chat_template=TEMPLATE)
    answer = client.chat.completions.create(
        messages=[{"role": "user", "content": "x"}], tools=[CALC]
    )
    message = answer.choices[0].message
    assert message.tool_calls is None and answer.choices[0].finish_reason == "stop"
    (bad,) = message.malformed_tool_calls
    assert "not valid JSON" in bad.reason


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"stream": True}, "stream"),
        ({"logprobs": True}, "logprobs"),
        ({"tool_choice": "none"}, "none"),
    ],
)
def test_unsupported_arguments_are_refused_by_name(kwargs: dict, named: str) -> None:
    client = OpenAIClient(DirectModelHandle(CannedEngine({"": ["ok"]})), SamplingParams())
    with pytest.raises(EngineError, match=named):
        client.chat.completions.create(messages=[{"role": "user", "content": "x"}], **kwargs)
    assert client.history == []
