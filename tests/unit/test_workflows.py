"""Workflows: prompts from format keys, scoring through the reward registry, and one batched
generate call per step in `run_workflows`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch

from rft.engines.models import ModelSpec, build_byte_tokenizer, load_model
from rft.engines.rollout import HFRolloutEngine, Rollout, RolloutEngine, SamplingParams
from rft.errors import ConfigError, EngineError, TasksetError
from rft.events.models import Task
from rft.workflows import WORKFLOWS
from rft.workflows.math_workflow import MATH_SYSTEM_PROMPT
from rft.workflows.runner import (
    RejectedTasksError,
    run_workflows,
    sampling_params_for,
    split_runnable,
)

QA = {"prompt_key": "question", "response_key": "answer"}


def make_task(tid: str, payload: dict[str, Any], **kwargs: Any) -> Task:
    kwargs.setdefault("format", QA)
    kwargs.setdefault("workflow", "math_workflow")
    return Task(task_id=tid, taskset="t", epoch=0, index=0, payload=payload, **kwargs)


class CannedEngine(RolloutEngine):
    """A real byte tokenizer and chat template; replies come from a script keyed by prompt text.

    For each prompt, replies are the texts of the first `script` entry whose key occurs in the
    decoded prompt, cycled to `params.n`. Every generate call is recorded.
    """

    def __init__(self, script: dict[str, list[str]], wrong_count: bool = False) -> None:
        self._tokenizer = build_byte_tokenizer()
        self.script = script
        self.calls: list[tuple[list[list[int]], SamplingParams]] = []
        self.wrong_count = wrong_count

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def model_version(self) -> int:
        return 0

    def generate(
        self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[list[Rollout]]:
        self.calls.append(([list(p) for p in prompt_ids], params))
        out = []
        for prompt in prompt_ids:
            text = self._tokenizer.decode(list(prompt))
            replies = next(v for k, v in self.script.items() if k in text)
            n = params.n + (1 if self.wrong_count else 0)
            out.append([self._rollout(prompt, replies[i % len(replies)], params) for i in range(n)])
        return out

    def _rollout(self, prompt: Sequence[int], text: str, params: SamplingParams) -> Rollout:
        ids = np.asarray(self._tokenizer.encode(text, add_special_tokens=False), dtype=np.int32)
        return Rollout(
            prompt_ids=np.asarray(prompt, dtype=np.int32),
            response_ids=ids,
            logprobs=np.zeros(len(ids), dtype=np.float32),
            text=text,
            finish_reason="stop",
            logprob_temperature=params.logprob_temperature,
        )

    def load_state_dict(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError


def test_registry_names() -> None:
    assert set(WORKFLOWS.names()) >= {"math_workflow", "simple_workflow", "countdown_workflow"}
    with pytest.raises(ConfigError, match="did you mean 'math_workflow'"):
        WORKFLOWS.get("math_workflw")


def test_messages_from_format_keys() -> None:
    math = WORKFLOWS.get("math_workflow")()
    task = make_task("a", {"question": "What is 2 + 2?", "answer": 4})
    assert math.messages(task) == [
        {"role": "system", "content": MATH_SYSTEM_PROMPT},
        {"role": "user", "content": "What is 2 + 2?"},
    ]
    own = make_task(
        "b", {"question": "q", "answer": 1}, format={**QA, "system_prompt": "Be brief."}
    )
    assert math.messages(own)[0] == {"role": "system", "content": "Be brief."}
    keyed = make_task(
        "c",
        {"question": "q", "answer": 1, "sys": "From row."},
        format={**QA, "system_prompt": "ignored", "system_prompt_key": "sys"},
    )
    assert math.messages(keyed)[0]["content"] == "From row."
    simple = WORKFLOWS.get("simple_workflow")()
    assert simple.messages(make_task("d", {"question": "q"})) == [{"role": "user", "content": "q"}]
    chat = make_task(
        "e",
        {"chat": [{"role": "user", "content": "hi"}], "answer": 1},
        format={"prompt_type": "messages", "messages_key": "chat", "response_key": "answer"},
    )
    assert math.messages(chat)[1:] == [{"role": "user", "content": "hi"}]


def test_messages_refuse_bad_payload_naming_task() -> None:
    with pytest.raises(TasksetError, match="task x: prompt_key 'question'"):
        WORKFLOWS.get("math_workflow")().messages(make_task("x", {"answer": 1}))


def test_countdown_builds_question_and_scores() -> None:
    countdown = WORKFLOWS.get("countdown_workflow")()
    task = make_task(
        "cd",
        {"numbers": [3, 5, 2], "target": 16},
        format={"response_key": "target"},
        workflow="countdown_workflow",
    )
    assert "[3, 5, 2]" in countdown.messages(task)[-1]["content"]
    assert "16" in countdown.messages(task)[-1]["content"]
    assert countdown.score(task, "<answer>(3 + 5) * 2</answer>")[0] == 1.0
    assert countdown.check_payload({"numbers": "3,5", "target": 1}, {"response_key": "target"})
    renamed = make_task(
        "cd2",
        {"nums": [3, 5, 2], "target": 16},
        format={"response_key": "target", "workflow_args": json.dumps({"numbers_key": "nums"})},
        workflow="countdown_workflow",
    )
    assert countdown.score(renamed, "<answer>(3 + 5) * 2</answer>")[0] == 1.0


def test_score_uses_task_reward_and_its_args() -> None:
    math = WORKFLOWS.get("math_workflow")()
    task = make_task(
        "r",
        {"question": "q", "answer": 7},
        reward_fn="math_reward",
        format={**QA, "reward_fn_args": '{"correct_reward": 5.0}'},
    )
    assert math.score(task, "it is 7")[0] == 5.0
    fmt_task = make_task("f", {"question": "q", "answer": 7}, reward_fn="format_reward")
    assert math.score(fmt_task, "Answer: 3")[0] == 1.0


def test_run_workflows_one_generate_call_for_the_batch() -> None:
    engine = CannedEngine(
        {"2 + 2": ["4", "five", "Answer: 4."], "3 * 3": ["9"], "10 - 20": ["-10", "10"]}
    )
    tasks = [
        make_task("a", {"question": "What is 2 + 2?", "answer": 4}, repeat_times=3),
        make_task("b", {"question": "What is 3 * 3?", "answer": 9}, repeat_times=3),
        make_task("c", {"question": "What is 10 - 20?", "answer": -10}, repeat_times=3),
    ]
    results = run_workflows(tasks, engine, SamplingParams(temperature=0.7, max_tokens=16))
    assert len(engine.calls) == 1
    prompts, params = engine.calls[0]
    assert len(prompts) == 3 and params.n == 3 and params.temperature == 0.7
    assert prompts[0] == engine.chat_prompt_ids(WORKFLOWS.get("math_workflow")().messages(tasks[0]))
    by_id = {r.task.task_id: r for r in results}
    assert [r.task.task_id for r in results] == ["a", "b", "c"]
    assert [t.reward for t in by_id["a"].trajectories] == [1.0, 0.0, 1.0]
    assert [t.reward for t in by_id["b"].trajectories] == [1.0, 1.0, 1.0]
    assert [t.reward for t in by_id["c"].trajectories] == [1.0, 0.0, 1.0]
    assert [t.response_text for t in by_id["a"].trajectories] == ["4", "five", "Answer: 4."]
    assert by_id["a"].trajectories[1].info["parsed"] == ""


def test_run_workflows_groups_by_repeat_times_and_rollout_args() -> None:
    engine = CannedEngine({"q": ["1"]})
    tasks = [
        make_task("a", {"question": "q1", "answer": 1}, repeat_times=2),
        make_task("b", {"question": "q2", "answer": 1}, repeat_times=4),
        make_task(
            "c",
            {"question": "q3", "answer": 1},
            repeat_times=2,
            rollout_args={"temperature": 0.5, "top_k": -1, "logprobs": 0},
        ),
        make_task("d", {"question": "q4", "answer": 1}, repeat_times=2),
    ]
    results = run_workflows(tasks, engine, SamplingParams(temperature=1.0))
    assert sorted((len(p), s.n, s.temperature) for p, s in engine.calls) == [
        (1, 2, 0.5),
        (1, 4, 1.0),
        (2, 2, 1.0),
    ]
    assert [len(r.trajectories) for r in results] == [2, 4, 2, 2]
    assert sampling_params_for(tasks[2], SamplingParams()).top_k == 0


def test_reply_prefix_is_prompted_and_scored() -> None:
    engine = CannedEngine({"q": [" 12"]})
    task = make_task(
        "p", {"question": "q", "answer": 12}, format={**QA, "reply_prefix": "The answer is"}
    )
    (result,) = run_workflows([task], engine, SamplingParams())
    prompt = engine.calls[0][0][0]
    assert engine.tokenizer.decode(prompt).endswith("The answer is")
    assert [t.reward for t in result.trajectories] == [1.0]


def test_bad_tasks_rejected_before_generation() -> None:
    engine = CannedEngine({"": ["1"]})
    tasks = [
        make_task("ok", {"question": "q", "answer": 1}),
        make_task("noanswer", {"question": "q"}),
        make_task("noworkflow", {"question": "q", "answer": 1}, workflow="nope"),
        make_task("noreward", {"question": "q", "answer": 1}, reward_fn="nope"),
    ]
    runnable, rejected = split_runnable(tasks)
    assert [t.task_id for t in runnable] == ["ok"]
    assert set(rejected) == {"noanswer", "noworkflow", "noreward"}
    assert "response_key 'answer'" in rejected["noanswer"]
    with pytest.raises(RejectedTasksError, match="3 task\\(s\\) rejected") as err:
        run_workflows(tasks, engine, SamplingParams())
    assert set(err.value.rejected) == {"noanswer", "noworkflow", "noreward"}
    assert engine.calls == []


def test_engine_returning_wrong_count_is_an_engine_error() -> None:
    engine = CannedEngine({"": ["1"]}, wrong_count=True)
    with pytest.raises(EngineError, match="returned 3 rollouts, expected 2"):
        run_workflows(
            [make_task("a", {"question": "q", "answer": 1}, repeat_times=2)],
            engine,
            SamplingParams(),
        )


def test_run_workflows_on_the_real_hf_engine_with_a_tiny_model() -> None:
    model, tokenizer = load_model(ModelSpec("tiny", seed=1))
    engine = HFRolloutEngine(model, tokenizer)
    tasks = [
        make_task(f"t{i}", {"question": f"What is {i} + 1?", "answer": i + 1}, repeat_times=2)
        for i in range(3)
    ]
    results = run_workflows(tasks, engine, SamplingParams(max_tokens=6, seed=0))
    for task, result in zip(tasks, results, strict=True):
        assert result.task is task
        assert len(result.trajectories) == 2
        for trajectory in result.trajectories:
            assert 1 <= len(trajectory.response_ids) <= 6
            assert trajectory.reward in (0.0, 1.0)
            # single-turn: every response token is the model's
            assert trajectory.action_mask.tolist() == [True] * len(trajectory.response_ids)
