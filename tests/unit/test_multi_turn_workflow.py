"""MultiTurnWorkflow over the real HF engine (tiny model) through a recording DirectModelHandle:
a concatenated trajectory's ids are, turn by turn, what the engine was fed and returned; step-wise
mode makes one trajectory per turn; the token limit truncates; a hung environment step fails."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from rft.engines.models import ModelSpec
from rft.engines.prompt_limits import PromptLimits, PromptTooLongError
from rft.engines.rollout import ROLLOUT_ENGINES, Rollout, RolloutEngineConfig, SamplingParams
from rft.events.models import Task
from rft.workflows import WORKFLOWS
from rft.workflows.deadline import WorkflowTimeoutError
from rft.workflows.model_handle import DirectModelHandle, LimitedModelHandle
from rft.workflows.multi_turn import Episode, MultiTurnWorkflow, StepAnswer
from rft.workflows.step_runner import StepLimits, run_step
from rft.workflows.trajectory import step_metrics


def multi_turn(name: str) -> MultiTurnWorkflow:
    workflow = WORKFLOWS.get(name)()
    assert isinstance(workflow, MultiTurnWorkflow)
    return workflow


class RecordingHandle(DirectModelHandle):
    """A DirectModelHandle that keeps every generate call's prompt and replies."""

    def __init__(self, engine: Any) -> None:
        super().__init__(engine)
        self.calls: list[tuple[list[int], list[Rollout]]] = []

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> list[Rollout]:
        replies = super().generate(prompt_ids, params)
        self.calls.append((list(prompt_ids), replies))
        return replies


@pytest.fixture(scope="module")
def engine() -> Any:
    return ROLLOUT_ENGINES.get("hf")(RolloutEngineConfig(model=ModelSpec("tiny")))


def task(workflow: str, seed: int = 3, **fmt: Any) -> Task:
    args = fmt.pop("workflow_args", {})
    form = {k: str(v) for k, v in fmt.items()}
    if args:
        form["workflow_args"] = json.dumps(args)
    return Task(
        task_id=f"t-{seed}",
        taskset="games",
        epoch=0,
        index=0,
        payload={"seed": seed},
        workflow=workflow,
        format=form,
        repeat_times=1,
    )


PARAMS = SamplingParams(max_tokens=6, seed=11, temperature=1.0)


def test_three_turn_trajectory_is_the_ids_fed_and_returned(engine: Any) -> None:
    handle = RecordingHandle(engine)
    workflow = multi_turn("guess_number")
    (traj,) = workflow.run(task("guess_number", workflow_args={"max_turns": 3}), handle, PARAMS, 0)
    assert len(handle.calls) == 3
    first_prompt = handle.calls[0][0]
    assert list(traj.prompt_ids) == first_prompt
    ids = traj.token_ids.tolist()
    mask = [True] * len(traj.prompt_ids) + traj.action_mask.tolist()  # prompt: never sampled
    logprobs = [0.0] * len(traj.prompt_ids) + traj.logprobs.tolist()
    for turn, (fed, (reply,)) in enumerate(handle.calls):
        start, end = len(fed), len(fed) + len(reply.response_ids)
        assert ids[:start] == fed, f"turn {turn}: the trajectory does not extend the ids fed"
        assert ids[start:end] == reply.response_ids.tolist(), f"turn {turn}: reply ids differ"
        assert all(mask[start:end]), f"turn {turn}: model tokens must have action_mask 1"
        np.testing.assert_array_equal(np.asarray(logprobs[start:end], np.float32), reply.logprobs)
        if turn + 1 < len(handle.calls):
            following = handle.calls[turn + 1][0]
            between = slice(end, len(following))
            assert len(following) > end, "the environment said something between turns"
            assert not any(mask[between]), "environment tokens must have action_mask 0"
            assert not any(logprobs[between])
    assert end == len(ids), "the trajectory ends with the last reply"
    assert traj.metrics["turns"] == 3
    text = engine.tokenizer.decode(ids)
    assert "Reply with one whole number" in text or "higher" in text or "lower" in text


def test_step_wise_mode_makes_one_trajectory_per_turn(engine: Any) -> None:
    handle = RecordingHandle(engine)
    workflow = multi_turn("guess_number")
    t = task("guess_number", enable_concatenated_multi_turn=False, workflow_args={"max_turns": 3})
    steps = workflow.run(t, handle, PARAMS, 5)
    assert [s.turn for s in steps] == [0, 1, 2]
    assert {s.turn_count for s in steps} == {3}
    assert {s.rollout for s in steps} == {5}
    assert len({s.reward for s in steps}) == 1
    for step, (fed, (reply,)) in zip(steps, handle.calls, strict=True):
        assert step.prompt_ids.tolist() == fed
        assert step.response_ids.tolist() == reply.response_ids.tolist()
        assert step.action_mask.all()


def test_total_token_limit_truncates(engine: Any) -> None:
    handle = RecordingHandle(engine)
    workflow = multi_turn("guess_number")
    first = handle.chat_ids([{"role": "user", "content": "x"}])
    limit = 200
    assert len(first) < limit
    t = task("guess_number", workflow_args={"max_turns": 8, "max_total_tokens": limit})
    (traj,) = workflow.run(t, handle, SamplingParams(max_tokens=40, seed=2), 0)
    assert len(traj.token_ids) <= limit
    assert traj.truncated and traj.metrics["truncated"] == 1.0
    assert len(handle.calls) < 8


class HangingWorkflow(MultiTurnWorkflow):
    """An episode whose step never returns in time."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def check_payload(self, payload: Mapping[str, Any], fmt: Mapping[str, str]) -> str | None:
        return None

    def episode(self, task: Task, index: int) -> Episode:
        def step(reply: str) -> StepAnswer:
            self.release.wait(5)
            return StepAnswer([], 0.0, True)

        return Episode([{"role": "user", "content": "go"}], step, max_turns=2)

    def limits(self, task: Task, episode: Episode) -> Any:
        from rft.workflows.multi_turn import TurnLimits

        return TurnLimits(episode.max_turns, None, 0.2)


def test_a_hung_environment_step_fails_the_rollout(engine: Any) -> None:
    workflow = HangingWorkflow()
    try:
        with pytest.raises(WorkflowTimeoutError, match="env_step_timeout_s"):
            workflow.run(task("x"), DirectModelHandle(engine), PARAMS, 0)
    finally:
        workflow.release.set()


def test_step_metrics_average_turns_and_sum_tool_calls(engine: Any) -> None:
    workflow = multi_turn("guess_number")
    handle = DirectModelHandle(engine)
    made = [
        workflow.run(task("guess_number", workflow_args={"max_turns": n}), handle, PARAMS, 0)[0]
        for n in (2, 3)
    ]
    made.append(made[0].scored(0.0, {}, {"tool_calls": 2.0, "tool_calls/calculator/ok": 2.0}))
    metrics = step_metrics(made)
    assert metrics["turns_mean"] == pytest.approx((2 + 3 + 0) / 3)
    assert metrics["tool_calls_total"] == 2.0
    assert metrics["tool_calls/calculator/ok_total"] == 2.0
    assert metrics["truncated_mean"] == pytest.approx(sum(t.truncated for t in made[:2]) / 3)


def test_the_step_runner_plays_a_multi_turn_task_through_the_request_batcher(engine: Any) -> None:
    """The explorer's step runner hands a multi-turn task to its workflow (every rollout at once
    over one request batcher): each rollout comes back as one concatenated trajectory whose
    environment tokens between the model's turns are not trained."""
    t = task("guess_number", workflow_args={"max_turns": 3})
    outcome = run_step([t], engine, PARAMS, StepLimits())
    assert not outcome.given_up
    (result,) = outcome.results
    assert len(result.trajectories) == t.repeat_times
    for trajectory in result.trajectories:
        turns = int(trajectory.metrics["turns"])
        assert 1 <= turns <= 3
        assert trajectory.model_tokens == int(trajectory.action_mask.sum()) > 0
        if turns > 1:  # environment feedback sits between the model's turns, with mask 0
            assert not trajectory.action_mask.all()
            assert trajectory.action_mask[-1]


def test_a_turn_over_the_prompt_limit_ends_the_trajectory_at_the_last_reply(engine: Any) -> None:
    """Held to model.max_prompt_tokens turn by turn, a rollout whose third prompt is over the
    limit plays two turns (the same as unlimited, seeded), ends truncated at its second reply
    (the environment's message after it is not kept) and counts the end; the engine never sees
    the over-long prompt."""
    free = RecordingHandle(engine)
    workflow = multi_turn("guess_number")
    t = task("guess_number", workflow_args={"max_turns": 3})
    (whole,) = workflow.run(t, free, PARAMS, 0)
    assert len(free.calls) == 3
    second = len(free.calls[1][0])
    limited = RecordingHandle(engine)
    (cut,) = workflow.run(t, LimitedModelHandle(limited, PromptLimits(second, 10_000)), PARAMS, 0)
    assert [fed for fed, _ in limited.calls] == [fed for fed, _ in free.calls[:2]]
    (reply,) = limited.calls[1][1]
    assert cut.token_ids.tolist() == whole.token_ids.tolist()[: second + len(reply.response_ids)]
    assert cut.action_mask[-1] and cut.truncated
    assert cut.metrics["prompt_limit_ends"] == 1.0 and cut.metrics["truncated"] == 1.0
    assert whole.metrics["prompt_limit_ends"] == 0.0


def test_a_turn_reply_is_clamped_to_max_model_len(engine: Any) -> None:
    """The reply of a turn is cut so that the conversation fits model.max_model_len; the next
    turn, with no room left, ends the trajectory: it never grows past the limit."""
    free = RecordingHandle(engine)
    workflow = multi_turn("guess_number")
    t = task("guess_number", workflow_args={"max_turns": 3})
    workflow.run(t, free, PARAMS, 0)
    second = len(free.calls[1][0])
    limited = RecordingHandle(engine)
    (cut,) = workflow.run(
        t, LimitedModelHandle(limited, PromptLimits(10_000, second + 2)), PARAMS, 0
    )
    assert len(limited.calls) == 2
    (reply,) = limited.calls[1][1]
    assert len(reply.response_ids) <= 2
    assert len(cut.token_ids) <= second + 2 and cut.truncated


def test_the_step_runner_holds_multi_turn_tasks_to_the_prompt_limits(engine: Any) -> None:
    """Through the explorer's step runner: every rollout of a task stays within
    model.max_model_len and ends truncated when its conversation outgrows it (no engine error,
    nothing given up); a task whose first prompt is over model.max_prompt_tokens is refused at
    once, counted, and not retried."""
    free = RecordingHandle(engine)
    game = task("guess_number", workflow_args={"max_turns": 6})
    multi_turn("guess_number").run(game, free, PARAMS, 0)
    first = len(free.calls[0][0])
    limit = first + 12
    outcome = run_step(
        [game], engine, PARAMS, StepLimits(prompts=PromptLimits(limit, limit), max_retry_times=2)
    )
    assert not outcome.given_up
    (result,) = outcome.results
    for trajectory in result.trajectories:
        assert len(trajectory.token_ids) <= limit
        assert trajectory.truncated and trajectory.metrics["prompt_limit_ends"] == 1.0
    refused = run_step(
        [game],
        engine,
        PARAMS,
        StepLimits(prompts=PromptLimits(first - 1, 10_000), max_retry_times=2),
    )
    assert not refused.results and refused.retries == 0
    assert refused.refused_prompts == 1 and refused.failed_tasks == 0
    error = refused.given_up[game.task_id]
    assert isinstance(error, PromptTooLongError)
    assert "first prompt" in str(error) and "model.max_prompt_tokens" in str(error)


def test_step_metrics_count_a_step_wise_rollout_once(engine: Any) -> None:
    """Every step of a step-wise rollout carries the rollout's metrics; the step's tool-call
    totals count the rollout once, not once per step."""
    workflow = multi_turn("guess_number")
    t = task("guess_number", enable_concatenated_multi_turn=False, workflow_args={"max_turns": 3})
    steps = workflow.run(t, DirectModelHandle(engine), PARAMS, 0)
    assert len(steps) == 3
    counted = [
        dataclasses.replace(s, metrics={**s.metrics, "tool_calls/calculator/ok": 2.0})
        for s in steps
    ]
    metrics = step_metrics(counted)
    assert metrics["tool_calls/calculator/ok_total"] == 2.0
    assert metrics["turns_mean"] == 3.0
