"""Tools in the loop: multiplication_tool offers the calculator through the SmolLM2 tools template,
reads hermes calls, answers each (bad ones too) with a tool message, and counts them; and the
environment-id delta takes the exact ("prefix") or re-rendered path. The model is scripted here
(its replies are fixed texts tokenized by the real tokenizer) so the calls are known; everything
else is real: template, parser, executor, environment, trajectory."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rft.engines.models import ModelSpec
from rft.engines.rollout import ROLLOUT_ENGINES, Rollout, RolloutEngineConfig, SamplingParams
from rft.environments.multiplication import Multiplication
from rft.errors import ConfigError
from rft.events.models import Task
from rft.tools.chat_templates import tool_chat_template
from rft.tracing.spans import ROLLOUT, TOOL_CALL, TURN
from rft.workflows import WORKFLOWS
from rft.workflows.model_handle import DirectModelHandle
from rft.workflows.multi_turn import MultiTurnWorkflow
from rft.workflows.turn_ids import environment_ids, turn_closer


class ScriptedHandle(DirectModelHandle):
    """Replies with the next of `replies` (tokenized, ending with eos), whatever it is fed."""

    def __init__(self, engine: Any, replies: Sequence[str]) -> None:
        super().__init__(engine)
        self.replies = list(replies)
        self.prompts: list[list[int]] = []

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> list[Rollout]:
        self.prompts.append(list(prompt_ids))
        text = self.replies.pop(0)
        tok = self.tokenizer
        ids = [*tok.encode(text, add_special_tokens=False), tok.eos_token_id]
        return [
            Rollout(
                np.asarray(prompt_ids, np.int32),
                np.asarray(ids, np.int32),
                np.full(len(ids), -0.5, np.float32),
                text,
                "stop",
                params.logprob_temperature,
            )
        ]


@pytest.fixture(scope="module")
def engine() -> Any:
    return ROLLOUT_ENGINES.get("hf")(RolloutEngineConfig(model=ModelSpec("tiny")))


def tool_task(seed: int = 7, **fmt: str) -> Task:
    return Task(
        task_id=f"mul-{seed}",
        taskset="mul",
        epoch=0,
        index=0,
        payload={"seed": seed, "tools": ["calculator"]},
        workflow="multiplication_tool",
        format={
            "chat_template": tool_chat_template("smollm2_tools"),
            "tool_call_parser": "hermes",
            **fmt,
        },
    )


def test_tool_calls_good_and_bad_become_tool_messages_and_are_counted(engine: Any) -> None:
    env = Multiplication()
    env.reset(7)
    a, b = env.factors
    call = json.dumps({"name": "calculator", "arguments": {"expression": f"{a} * {b}"}})
    replies = [
        f"<tool_call>\n{call}\n</tool_call>",
        "<tool_call>{not json</tool_call>",
        '<tool_call>{"name": "calc", "arguments": {}}</tool_call>',
        f"Answer: {a * b}",
    ]
    handle = ScriptedHandle(engine, replies)
    workflow = WORKFLOWS.get("multiplication_tool")()
    assert isinstance(workflow, MultiTurnWorkflow)
    (traj,) = workflow.run(tool_task(), handle, SamplingParams(max_tokens=64), 0)
    tok = engine.tokenizer
    assert "calculator" in tok.decode(handle.prompts[0]), "the calculator is offered"
    assert traj.reward == 1.0
    m = traj.metrics
    assert m["turns"] == 4 and m["tool_calls"] == 3
    assert m["tool_calls/calculator/ok"] == 1
    assert m["tool_calls/malformed/malformed_call"] == 1
    assert m["tool_calls/calc/unknown_tool"] == 1
    unsampled = tok.decode(traj.response_ids[~traj.action_mask].tolist())
    assert str(a * b) in unsampled, "the calculator's result came back as a tool message"
    assert "could not be read" in unsampled and "no tool named 'calc'" in unsampled
    sampled = tok.decode(traj.response_ids[traj.action_mask].tolist())
    assert sampled.count("<tool_call>") == 3 and f"Answer: {a * b}" in sampled
    for prompt in handle.prompts[1:]:  # every turn is fed the whole trajectory so far
        assert traj.token_ids[: len(prompt)].tolist() == prompt


def test_tools_key_column_names_the_tools_offered(engine: Any) -> None:
    handle = ScriptedHandle(engine, ['<tool_call>{"name": "python", "arguments": {}}</tool_call>'])
    workflow = WORKFLOWS.get("multiplication_tool")()
    assert isinstance(workflow, MultiTurnWorkflow)
    task = tool_task(tools_key="tools", workflow_args=json.dumps({"max_turns": 1}))
    (traj,) = workflow.run(task, handle, SamplingParams(max_tokens=64), 0)
    # the row offers only the calculator: a python call is unknown
    assert traj.metrics["tool_calls/python/unknown_tool"] == 1


def test_environment_ids_prefix_and_rerendered(engine: Any) -> None:
    handle = DirectModelHandle(engine)
    tok = engine.tokenizer
    chat = [{"role": "user", "content": "guess"}, {"role": "assistant", "content": "42"}]
    new = [{"role": "user", "content": "higher"}]
    rendered = handle.chat_ids(chat, add_generation_prompt=False)
    eos_at = len(rendered) - 1 - rendered[::-1].index(tok.eos_token_id)
    so_far = rendered[: eos_at + 1]  # the model stopped at its eos
    after = handle.chat_ids([*chat, *new])
    exact = environment_ids(handle, so_far, chat, new)
    assert exact.how == "prefix" and so_far + exact.ids == after
    # the model wrote "42\n" with no eos (cut), the conversation holds "42" (as a parsed reply's
    # stripped content does): the template's rendering cannot extend the ids, so the delta is
    # taken between renderings, after the template's own end of turn
    head = handle.chat_ids(chat[:1])
    odd = head + tok.encode("42\n", add_special_tokens=False)
    cut = environment_ids(handle, odd, chat, new)
    assert cut.how == "rerendered"
    assert cut.ids == rendered[eos_at:] + after[len(rendered) :]
    # a model whose eos is the next turn's start wrote the end of its turn and that start itself
    closer = turn_closer(handle)
    assert closer == rendered[eos_at:]
    opening = after[len(rendered) : len(rendered) + 1]
    stopped = head + tok.encode("42 ", add_special_tokens=False) + closer + opening
    own = environment_ids(handle, stopped, chat, new)
    assert own.how == "rerendered" and own.ids == after[len(rendered) + 1 :]


def test_each_turn_and_tool_call_is_a_span_inside_the_tasks_rollout(engine: Any) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    workflow = WORKFLOWS.get("multiplication_tool")()
    assert isinstance(workflow, MultiTurnWorkflow)
    workflow.tracer = provider.get_tracer("test")
    calls = '<tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}</tool_call>'
    handle = ScriptedHandle(engine, [calls + calls, "Answer: 6"])
    with workflow.tracer.start_as_current_span(ROLLOUT) as rollout:
        workflow.run(tool_task(), handle, SamplingParams(max_tokens=64), 0)
    spans = exporter.get_finished_spans()
    turns = [s for s in spans if s.name == TURN]
    tools = [s for s in spans if s.name == TOOL_CALL]
    assert [dict(s.attributes or {})["rft.turn"] for s in turns] == [0, 1]
    assert [s.parent.span_id if s.parent else None for s in turns] == [
        rollout.get_span_context().span_id
    ] * 2
    first_turn = turns[0].context.span_id if turns[0].context else None
    assert [s.parent.span_id if s.parent else None for s in tools] == [first_turn] * 2
    assert {dict(s.attributes or {})["rft.tool_outcome"] for s in tools} == {"ok"}


def test_tool_call_workflow_answers_a_row_with_its_tools_and_scores_the_answer(
    engine: Any,
) -> None:
    a, b = 481, 937
    row = {"question": f"What is {a} * {b}?", "answer": a * b, "tools": ["calculator"]}
    fmt = {
        "prompt_key": "question",
        "response_key": "answer",
        "tools_key": "tools",
        "chat_template": tool_chat_template("smollm2_tools"),
    }
    t = Task(task_id="row", taskset="rows", epoch=0, index=0, payload=row, format=fmt)
    call = json.dumps({"name": "calculator", "arguments": {"expression": f"{a}*{b}"}})
    workflow = WORKFLOWS.get("tool_call_workflow")()
    assert isinstance(workflow, MultiTurnWorkflow)
    assert workflow.check_payload(row, fmt) is None
    assert "tools_key" in str(workflow.check_payload({**row, "tools": "calculator"}, fmt))
    right = ScriptedHandle(engine, [f"<tool_call>{call}</tool_call>", f"It is {a * b}."])
    (traj,) = workflow.run(t, right, SamplingParams(max_tokens=64), 0)
    assert traj.reward == 1.0 and traj.metrics["tool_calls/calculator/ok"] == 1
    assert str(a * b) in engine.tokenizer.decode(right.prompts[1])  # the tool's answer was fed
    wrong = ScriptedHandle(engine, [f"It is {a * b + 1}."])
    (traj,) = workflow.run(t, wrong, SamplingParams(max_tokens=64), 0)
    assert traj.reward == 0.0 and traj.metrics["tool_calls"] == 0


def test_tool_call_reward_shapes_rollouts_whose_call_ran(engine: Any) -> None:
    workflow = WORKFLOWS.get("multiplication_tool")()
    assert isinstance(workflow, MultiTurnWorkflow)
    env = Multiplication()
    env.reset(7)
    product = env.factors[0] * env.factors[1]
    good = '<tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}</tool_call>'
    shaped = tool_task(workflow_args=json.dumps({"tool_call_reward": 0.25}))
    params = SamplingParams(max_tokens=64)

    def play(task: Task, replies: list[str]) -> tuple[float, float]:
        (traj,) = workflow.run(task, ScriptedHandle(engine, replies), params, 0)
        return traj.reward, traj.metrics["call_rewarded"]

    # a call that ran, then a wrong answer: only the shaping reward; a right one: both
    assert play(shaped, [good, f"Answer: {product + 1}"]) == (0.25, 1.0)
    assert play(shaped, [good, f"Answer: {product}"]) == (1.25, 1.0)
    # no call, or only calls that did not run, earn nothing for calling
    assert play(shaped, [f"Answer: {product}"]) == (1.0, 0.0)
    bad = '<tool_call>{"name": "calc", "arguments": {}}</tool_call>'
    assert play(shaped, ["<tool_call>{not json</tool_call>", bad, "Answer: 1"]) == (0.0, 0.0)
    # unset (the default) it changes nothing
    assert play(tool_task(), [good, f"Answer: {product + 1}"]) == (0.0, 0.0)
    with pytest.raises(ConfigError, match="tool_call_reward"):
        play(tool_task(workflow_args=json.dumps({"tool_call_reward": -1})), [good])
