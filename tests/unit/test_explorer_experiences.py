"""The explorer's experiences say which temperature their logprobs are at and which explorer
group made them, from a real rollout on a tiny model (no broker: only the step's pure part)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rft.catalog import load_config
from rft.consumers.explorer.explorer import Explorer
from rft.engines.logprobs import token_logprobs
from rft.engines.models import ModelSpec, load_model
from rft.engines.rollout import HFRolloutEngine, SamplingParams
from rft.events.codec import EventCodec
from rft.events.models import Task
from rft.workflows.runner import WorkflowResult, run_workflows
from tests.unit.config_samples import MINIMAL


def task(tid: str, rollout_args: dict[str, object]) -> Task:
    return Task(
        task_id=tid,
        taskset="arithmetic",
        epoch=0,
        index=0,
        payload={"question": "What is 3 + 4?", "answer": 7},
        format={"prompt_key": "question", "response_key": "answer"},
        workflow="math_workflow",
        rollout_args=rollout_args,
        repeat_times=2,
    )


@pytest.mark.parametrize(
    ("rollout_args", "temperature"),
    [({"temperature": 0.7}, 0.7), ({"temperature": 1.3}, 1.3), ({"temperature": 0.0}, 1.0)],
    ids=["0.7", "1.3", "greedy"],
)
def test_experiences_carry_logprob_temperature_and_explorer_group(
    tmp_path: Path, rollout_args: dict[str, object], temperature: float
) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    model, tok = load_model(ModelSpec("tiny", seed=3))
    engine = HFRolloutEngine(model, tok)
    explorer = Explorer(load_config(path), explorer_id="explorer-a", engine=engine)
    (result,) = run_workflows(
        [task("t1", rollout_args)], engine, SamplingParams(max_tokens=6, seed=1)
    )
    experiences = explorer._experiences(result, version=3)
    assert len(experiences) == 2
    for exp in experiences:
        assert exp.logprob_temperature == temperature
        assert exp.explorer_group == explorer.plan.explorer_group == "p.n.explorer.explorer"
        # the temperature it claims is the one that reproduces its logprobs
        ids = torch.from_numpy(exp.token_ids().astype(np.int64))[None]
        with torch.no_grad():
            lp, _ = token_logprobs(
                model, ids, temperature=exp.logprob_temperature, start=exp.prompt_length - 1
            )
        np.testing.assert_allclose(exp.logprobs, lp[0].numpy(), atol=1e-4)
        decoded = EventCodec.default().decode(EventCodec.default().encode(exp))
        assert decoded == exp


def test_steps_of_a_step_wise_rollout_name_their_trajectory_and_turn(tmp_path: Path) -> None:
    """Two rollouts of 3 and 2 steps: 5 experiences in a group of 2 trajectories, each step with
    its trajectory id, turn and turn count, as the trainer's group assembly needs them."""
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    model, tok = load_model(ModelSpec("tiny", seed=3))
    engine = HFRolloutEngine(model, tok)
    explorer = Explorer(load_config(path), explorer_id="explorer-a", engine=engine)
    (result,) = run_workflows([task("t1", {})], engine, SamplingParams(max_tokens=4, seed=1))
    one = result.trajectories[0]
    steps = [one.as_step(0, t, 3) for t in range(3)] + [one.as_step(1, t, 2) for t in range(2)]
    experiences = explorer._experiences(WorkflowResult(result.task, steps), version=1)
    assert {e.group_size for e in experiences} == {2}
    assert [(e.turn, e.turn_count) for e in experiences] == [(0, 3), (1, 3), (2, 3), (0, 2), (1, 2)]
    ids = [e.trajectory_id for e in experiences]
    assert len(set(ids[:3])) == 1 and len(set(ids[3:])) == 1 and ids[0] != ids[3]
    for exp in experiences:
        assert EventCodec.default().decode(EventCodec.default().encode(exp)) == exp
    whole = explorer._experiences(result, version=1)
    assert {(e.trajectory_id, e.turn, e.turn_count, e.group_size) for e in whole} == {("", 0, 1, 2)}
