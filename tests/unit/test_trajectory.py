"""`Trajectory`: a single-turn reply, and turns of the model and the environment concatenated into
one trajectory whose action mask and logprobs say which tokens the model sampled; the explorer's
Experience carries them through the codec."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from rft.catalog import load_config
from rft.consumers.explorer.explorer import Explorer
from rft.engines.rollout import Rollout, SamplingParams
from rft.errors import RftError
from rft.events.codec import EventCodec
from rft.events.models import Experience, Task
from rft.workflows.registry import WORKFLOWS
from rft.workflows.runner import WorkflowResult, run_workflows
from rft.workflows.trajectory import Trajectory, experiences_of, rollouts_in
from rft.workflows.workflow import Workflow
from tests.unit.config_samples import MINIMAL
from tests.unit.test_workflows import CannedEngine


def reply(prompt: list[int], ids: list[int], text: str, finish: str = "stop") -> Rollout:
    logprobs = -np.arange(1, len(ids) + 1, dtype=np.float32) / 10
    return Rollout(np.array(prompt, np.int32), np.array(ids, np.int32), logprobs, text, finish, 0.7)


def task(tid: str = "t") -> Task:
    return Task(
        task_id=tid,
        taskset="s",
        epoch=0,
        index=0,
        payload={"question": "What is 3 + 4?", "answer": 7},
        format={"prompt_key": "question", "response_key": "answer"},
        workflow="math_workflow",
        repeat_times=1,
    )


def two_turns() -> Trajectory:
    """The model answers, a tool replies, the model answers again from the whole sequence."""
    first = Trajectory.of_reply(reply([1, 2, 3], [10, 11], "Answer: 6"))
    checked = first.then_environment([90, 91, 92], " [wrong] ")
    second = reply(checked.token_ids.tolist(), [12, 13, 14], "Answer: 7", finish="length")
    return checked.then_model(second).scored(1.0, {"correct": 1.0}, {"turns": 2.0})


def test_a_single_reply_is_all_model_tokens() -> None:
    got = Trajectory.of_reply(reply([1, 2], [5, 6, 7], "x", finish="length"))
    assert got.prompt_ids.tolist() == [1, 2] and got.response_ids.tolist() == [5, 6, 7]
    assert got.action_mask.tolist() == [True, True, True]
    assert got.logprobs.tolist() == pytest.approx([-0.1, -0.2, -0.3])
    assert got.model_tokens == 3 and got.truncated and got.reward == 0.0
    assert got.token_ids.tolist() == [1, 2, 5, 6, 7]


def test_turns_concatenate_with_the_environment_masked_out() -> None:
    got = two_turns()
    assert got.prompt_ids.tolist() == [1, 2, 3]
    assert got.response_ids.tolist() == [10, 11, 90, 91, 92, 12, 13, 14]
    assert got.action_mask.tolist() == [True, True, False, False, False, True, True, True]
    # the environment's tokens were sampled by no policy: logprob 0, the model's kept as sampled
    assert got.logprobs.tolist() == pytest.approx([-0.1, -0.2, 0, 0, 0, -0.1, -0.2, -0.3])
    assert got.response_text == "Answer: 6 [wrong] Answer: 7"
    assert got.model_tokens == 5 and got.finish_reason == "length" and got.truncated
    assert (got.reward, dict(got.info), dict(got.metrics)) == (
        1.0,
        {"correct": 1.0},
        {"turns": 2.0},
    )


def test_a_model_turn_must_be_sampled_from_the_whole_sequence() -> None:
    first = Trajectory.of_reply(reply([1, 2, 3], [10, 11], "a")).then_environment([90], "b")
    with pytest.raises(ValueError, match="whole token sequence \\(6 tokens\\); its prompt has 5"):
        first.then_model(reply([1, 2, 3, 10, 11], [12], "c"))
    other_t = Rollout(
        first.token_ids, np.array([12], np.int32), np.zeros(1, np.float32), "c", "stop", 1.0
    )
    with pytest.raises(ValueError, match="T=1, the trajectory's at T=0.7"):
        first.then_model(other_t)


def test_token_arrays_must_line_up() -> None:
    with pytest.raises(ValueError, match="3 response tokens but 2 logprobs and 3 action mask"):
        Trajectory(
            np.array([1], np.int32),
            np.array([1, 2, 3], np.int32),
            np.zeros(2, np.float32),
            np.ones(3, np.bool_),
            "",
            "stop",
            1.0,
        )


def test_the_explorer_writes_the_trajectory_mask_and_metrics(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    explorer = Explorer(load_config(path), explorer_id="x", engine=CannedEngine({}))
    trajectory = two_turns()
    (exp,) = explorer._experiences(WorkflowResult(task(), [trajectory]), version=2)
    codec = EventCodec.default()
    decoded = codec.decode(codec.encode(exp))
    assert isinstance(decoded, Experience) and decoded == exp
    assert decoded.action_mask.tolist() == trajectory.action_mask.tolist()
    assert decoded.response_ids.tolist() == trajectory.response_ids.tolist()
    assert decoded.logprobs.tolist() == trajectory.logprobs.tolist()
    assert decoded.action_count == 5 and decoded.truncated
    assert decoded.metrics == {"turns": 2.0} and decoded.info == {"correct": "1.0"}
    assert decoded.logprob_temperature == pytest.approx(0.7)


class NoTrajectories(Workflow):
    def trajectories(self, task: Task, prefix: str, replies: object) -> list[Trajectory]:
        return []


WORKFLOWS.add("no_trajectory_workflow", NoTrajectories, replace=True)


def test_a_workflow_that_makes_no_trajectory_fails_its_task() -> None:
    empty = dataclasses.replace(task(), workflow="no_trajectory_workflow")
    with pytest.raises(
        RftError, match="task t: workflow NoTrajectories made no trajectory of its 1"
    ):
        run_workflows([empty], CannedEngine({"": ["7"]}), SamplingParams())


def test_the_steps_of_step_wise_rollouts_are_one_group_counting_rollouts() -> None:
    """Two rollouts cut into steps (3 and 2): five experiences of one group of 2, each step
    naming its rollout's trajectory, and every field of the trajectory carried over."""
    whole = two_turns()
    steps = [whole.as_step(0, t, 3) for t in range(3)] + [whole.as_step(1, t, 2) for t in range(2)]
    assert rollouts_in(steps) == 2 and rollouts_in([whole, whole]) == 2
    made = experiences_of(
        steps,
        id_prefix="g",
        task_id="t",
        group_id="t:e:1",
        group_size=rollouts_in(steps),
        explorer_id="e",
        model_version=3,
        explorer_group="run.explorer.main",
    )
    assert [e.experience_id for e in made] == [f"g:{i}" for i in range(5)]
    assert [e.trajectory_id for e in made] == ["g/0"] * 3 + ["g/1"] * 2
    assert [(e.turn, e.turn_count) for e in made] == [(0, 3), (1, 3), (2, 3), (0, 2), (1, 2)]
    assert {(e.group_id, e.group_size, e.model_version) for e in made} == {("t:e:1", 2, 3)}
    first = made[0]
    assert np.array_equal(first.action_mask, whole.action_mask)
    assert np.array_equal(first.logprobs, whole.logprobs)
    assert first.metrics == dict(whole.metrics) and first.info == {"correct": "1.0"}
    (single,) = experiences_of(
        [whole],
        id_prefix="s",
        task_id="t",
        group_id="t",
        group_size=1,
        explorer_id="e",
        model_version=0,
        explorer_group="",
    )
    assert single.trajectory_id == "" and single.truncated == whole.truncated
