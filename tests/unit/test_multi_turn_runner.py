"""Multi-turn workflows in an explorer step (tiny model): every (task, rollout) runs at once over
one RequestBatcher, so a step makes one engine call per turn; each trajectory holds the exact ids
the engine was fed and returned; a failing or overrunning instance fails only its task, which is
retried and dead-lettered as a single-turn task is; single-turn tasks keep their own call."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pytest

from rft.engines.model_handle import ModelHandle
from rft.engines.rollout import SamplingParams
from rft.events.models import Task
from rft.rewards import REWARD_FUNCTIONS
from rft.workflows import multi_turn_runner
from rft.workflows.deadline import WorkflowFailedError, WorkflowTimeoutError
from rft.workflows.registry import WORKFLOWS
from rft.workflows.step_runner import StepLimits, run_step
from rft.workflows.trajectory import Trajectory
from rft.workflows.workflow import Workflow
from tests.unit.test_request_batcher import CountingEngine, tiny_engine
from tests.unit.test_workflows import make_task

RELEASE = threading.Event()
# (task_id, index) -> the ids of each model turn's prompt and reply, as the workflow saw them
SEEN: dict[tuple[str, int], list[tuple[list[int], list[int]]]] = {}
ATTEMPTS: dict[str, int] = {}


class EchoGame(Workflow):
    """A test game: `turns` model turns, each answered by the user's "again"; payload `fail`
    raises in rollout 1 on the first `fail` attempts, `hang` blocks after the first turn."""

    drives_model: ClassVar[bool] = True

    def run(
        self, task: Task, model: ModelHandle, params: SamplingParams, index: int
    ) -> list[Trajectory]:
        key = (task.task_id, index)
        SEEN[key] = []
        if index == 0:
            ATTEMPTS[task.task_id] = ATTEMPTS.get(task.task_id, 0) + 1
        ids = model.chat_ids([{"role": "user", "content": task.payload["question"]}])
        env = model.chat_ids([{"role": "user", "content": "again"}])
        trajectory: Trajectory | None = None
        for turn in range(int(task.payload["turns"])):
            if turn == 1 and task.payload.get("hang"):
                RELEASE.wait(60)
            if index == 1 and turn == 1 and ATTEMPTS[task.task_id] <= task.payload.get("fail", 0):
                raise RuntimeError(f"the game broke in rollout {index}")
            prompt = ids if trajectory is None else [int(i) for i in trajectory.token_ids]
            (reply,) = model.generate(prompt, params)
            SEEN[key].append((prompt, [int(i) for i in reply.response_ids]))
            if trajectory is None:
                trajectory = Trajectory.of_reply(reply)
            else:
                trajectory = trajectory.then_model(reply)
            trajectory = trajectory.then_environment(env, "again")
        assert trajectory is not None
        return [trajectory.scored(float(index), {}, {"turns": float(task.payload["turns"])})]


WORKFLOWS.add("echo_game_test", EchoGame, replace=True)
REWARD_FUNCTIONS.add("zero_reward_test", lambda text, payload, **_: (0.0, {}), replace=True)


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    SEEN.clear()
    ATTEMPTS.clear()
    RELEASE.clear()
    yield
    RELEASE.set()


def game(tid: str, turns: int, repeat: int = 2, **payload: Any) -> Task:
    return make_task(
        tid,
        {"question": f"play {tid}", "turns": turns, **payload},
        workflow="echo_game_test",
        reward_fn="zero_reward_test",
        repeat_times=repeat,
    )


GREEDY = SamplingParams(temperature=0.0, max_tokens=4, seed=3)


@pytest.fixture
def waves_by_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gathering window so long that only "every live instance waits" flushes a wave: the
    calls a step makes are then exact on a loaded machine (no timing)."""
    monkeypatch.setattr(multi_turn_runner, "DEFAULT_WINDOW_S", 30.0)


@pytest.mark.usefixtures("waves_by_turn")
def test_a_step_of_multi_turn_tasks_makes_one_call_per_turn_with_exact_ids() -> None:
    engine = CountingEngine(tiny_engine())
    tasks = [game("a", 3), game("b", 3), game("c", 2, repeat=3)]
    outcome = run_step(tasks, engine, GREEDY, StepLimits(runner_per_model=8))
    assert outcome.given_up == {}
    assert [len(r.trajectories) for r in outcome.results] == [2, 2, 3]
    # 7 instances at turn 1 and 2, the 4 of the 3-turn tasks at turn 3
    assert [n for n, _ in engine.calls] == [7, 7, 4]
    assert all(p.n == 1 for _, p in engine.calls)
    for result in outcome.results:
        for index, trajectory in enumerate(result.trajectories):
            turns = SEEN[(result.task.task_id, index)]
            assert len(turns) == result.task.payload["turns"]
            assert trajectory.reward == float(index)
            # the trajectory is the first prompt, then each reply the engine gave, in place
            assert list(trajectory.prompt_ids) == turns[0][0]
            model_ids = trajectory.response_ids[trajectory.action_mask]
            assert list(model_ids) == [i for _, reply in turns for i in reply]
            for (prompt, reply), (next_prompt, _) in zip(turns, turns[1:], strict=False):
                assert next_prompt[: len(prompt) + len(reply)] == prompt + reply
            np.testing.assert_array_equal(trajectory.logprobs[~trajectory.action_mask], 0.0)


@pytest.mark.usefixtures("waves_by_turn")
def test_single_turn_tasks_in_the_same_step_keep_their_one_call() -> None:
    engine = CountingEngine(tiny_engine())
    single = make_task("s", {"question": "1+1?", "answer": 2}, repeat_times=2)
    outcome = run_step([game("a", 2), single], engine, GREEDY, StepLimits(runner_per_model=8))
    assert outcome.given_up == {}
    assert [r.task.task_id for r in outcome.results] == ["a", "s"]
    assert [(n, p.n) for n, p in engine.calls] == [(1, 2), (2, 1), (2, 1)]


@pytest.mark.usefixtures("waves_by_turn")
def test_a_failing_instance_fails_only_its_task_which_is_retried() -> None:
    engine = CountingEngine(tiny_engine())
    tasks = [game("ok", 2), game("flaky", 2, fail=1), game("broken", 2, fail=99)]
    outcome = run_step(tasks, engine, GREEDY, StepLimits(runner_per_model=8, max_retry_times=1))
    assert [r.task.task_id for r in outcome.results] == ["ok", "flaky"]
    assert set(outcome.given_up) == {"broken"}
    error = outcome.given_up["broken"]
    assert isinstance(error, WorkflowFailedError)
    assert "gave up after 2 attempt(s)" in str(error) and "game broke" in str(error)
    assert outcome.retries == 2
    assert ATTEMPTS == {"ok": 1, "flaky": 2, "broken": 2}


def test_an_overrunning_instance_times_out_without_holding_the_others() -> None:
    engine = CountingEngine(tiny_engine())
    tasks = [game("stuck", 3, repeat=1, hang=True), game("fine", 3, repeat=1)]
    limits = StepLimits(runner_per_model=8, max_timeout=10.0)
    outcome = run_step(tasks, engine, GREEDY, limits)
    assert [r.task.task_id for r in outcome.results] == ["fine"]
    assert isinstance(outcome.given_up["stuck"], WorkflowTimeoutError)
    assert outcome.timeouts == 1
    # "fine" played its 3 turns while "stuck" hung after its first
    assert len(SEEN[("fine", 0)]) == 3 and len(SEEN[("stuck", 0)]) == 1
