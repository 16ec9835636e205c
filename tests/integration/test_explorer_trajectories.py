"""A workflow's trajectories on the real Kafka: a workflow whose trajectories end with a tool's
tokens (action mask 0) has them explored, committed and read back from the experience topic with
the workflow's mask, logprobs, reward and metrics as it made them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.explorer.explorer import Explorer
from rft.consumers.run_plan import RunPlan
from rft.engines.rollout import Rollout
from rft.events.models import Experience, Task
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.producers.task_publisher import TaskPublisher, load_run_tasksets, publish_tasksets
from rft.workflows.registry import WORKFLOWS
from rft.workflows.simple_workflow import SimpleWorkflow
from rft.workflows.trajectory import Trajectory
from tests.integration.test_rft_loop import read_all

pytestmark = pytest.mark.integration

TOOL_IDS = [7, 8, 9]  # a checker's verdict, appended after each reply


class CheckedWorkflow(SimpleWorkflow):
    """Each reply followed by a checker's tokens; the reward and a metric count its length."""

    def trajectories(self, task: Task, prefix: str, replies: Sequence[Rollout]) -> list[Trajectory]:
        return [
            Trajectory.of_reply(reply)
            .then_environment(TOOL_IDS, " [checked]")
            .scored(float(len(reply.response_ids)), {"checked": "yes"}, {"replies": 1.0})
            for reply in replies
        ]


WORKFLOWS.add("checked_it_workflow", CheckedWorkflow, replace=True)


def explore_one_step(
    raw: dict[str, Any], tmp_path: Path, unique: str
) -> tuple[Any, list[Experience]]:
    """Publish the config's taskset, run one explorer to its end, and read back its experiences."""
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    cfg = load_config(config_path)
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, plan.topics)
    with EventWriter.open(cfg.stack.kafka) as writer:
        publish_tasksets(
            TaskPublisher(writer), load_run_tasksets(cfg), plan.topics, epochs=1, seed=0
        )
    summary = Explorer(cfg, idle_timeout_s=10).run()
    experiences = [
        e for e in read_all(cfg, plan.experience_topic, unique + "-e") if isinstance(e, Experience)
    ]
    return summary, experiences


def test_experiences_read_back_carry_the_workflows_action_mask(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    rows = [{"question": f"What is {i} + 1?", "answer": i + 1} for i in range(2)]
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    raw = {
        "project": "rft-it",
        "name": unique,
        "mode": "explore",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {"model_path": "tiny", "max_prompt_tokens": 64, "max_response_tokens": 6},
        "buffer": {
            "batch_size": len(rows),
            "total_steps": 1,
            "explorer_input": {
                "default_workflow_type": "checked_it_workflow",
                "default_reward_fn_type": "accuracy_reward",
                "taskset": {
                    "name": "checked",
                    "path": str(data),
                    "format": {"prompt_key": "question", "response_key": "answer"},
                },
            },
        },
        "explorer": {"eval_on_startup": False},
        "synchronizer": {"sync_style": "trainer_driven"},  # the explorer never waits for weights
        "stack": {
            "kafka": {"bootstrap_servers": stack.kafka.bootstrap_servers},
            "object_store": {"endpoint": stack.object_store.endpoint, "bucket": "rft-it"},
        },
    }
    summary, experiences = explore_one_step(raw, tmp_path, unique)
    assert summary.steps == 1 and len(experiences) == summary.experiences == 2 * len(rows)
    # the summary counts the model's tokens, not the checker's
    assert summary.generated_tokens == sum(e.action_count for e in experiences)
    for exp in experiences:
        replied = exp.response_length - len(TOOL_IDS)
        assert 1 <= replied <= 6
        assert exp.action_mask.tolist() == [True] * replied + [False] * len(TOOL_IDS)
        assert exp.response_ids[replied:].tolist() == TOOL_IDS
        assert exp.response_text.endswith(" [checked]")
        # the model's tokens keep their sampled logprobs; the checker's were sampled by nobody
        assert np.all(exp.logprobs[:replied] < 0) and np.all(exp.logprobs[replied:] == 0)
        assert exp.reward == float(replied) and exp.group_size == 2
        assert exp.info == {"checked": "yes"} and exp.metrics == {"replies": 1.0}


@pytest.mark.parametrize("concatenated", [True, False], ids=["concatenated", "step-wise"])
def test_a_multi_turn_game_is_explored_into_experiences_with_holed_masks(
    stack: StackSettings, unique: str, tmp_path: Path, concatenated: bool
) -> None:
    """guess_number tasks from its generator, explored by a real Explorer on the tiny model (every
    rollout a workflow instance over the request batcher): concatenated, each rollout is one
    experience whose environment feedback between the model's turns has mask 0 and logprob 0;
    step-wise, each turn is one experience naming its trajectory, turn and turn count."""
    raw = {
        "project": "rft-it",
        "name": unique,
        "mode": "explore",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {
            "algorithm_type": "grpo" if concatenated else "multi_step_grpo",
            "repeat_times": 2,
        },
        "model": {"model_path": "tiny", "max_prompt_tokens": 512, "max_response_tokens": 6},
        "buffer": {
            "batch_size": 2,
            "total_steps": 1,
            "explorer_input": {
                "default_workflow_type": "guess_number",
                "taskset": {
                    "name": "games",
                    "storage_type": "generator",
                    "path": "guess_number",
                    "generator_args": {"num_tasks": 2},
                    "workflow_args": {"max_turns": 3},
                    "format": {"enable_concatenated_multi_turn": concatenated},
                },
            },
        },
        "explorer": {"eval_on_startup": False},
        "synchronizer": {"sync_style": "trainer_driven"},
        "stack": {
            "kafka": {"bootstrap_servers": stack.kafka.bootstrap_servers},
            "object_store": {"endpoint": stack.object_store.endpoint, "bucket": "rft-it"},
        },
    }
    summary, experiences = explore_one_step(raw, tmp_path, unique)
    assert summary.steps == 1 and len(experiences) == summary.experiences
    assert {e.task_id for e in experiences} and all(e.group_size == 2 for e in experiences)
    if concatenated:
        assert len(experiences) == 4
        for exp in experiences:
            assert exp.trajectory_id == "" and (exp.turn, exp.turn_count) == (0, 1)
            turns = int(exp.metrics["turns"])
            assert exp.action_count > 0
            assert np.all(exp.logprobs[~exp.action_mask] == 0)
            if turns > 1:
                assert not exp.action_mask.all() and exp.action_mask[-1]
        assert summary.generated_tokens == sum(e.action_count for e in experiences)
    else:
        by_trajectory: dict[str, list[Experience]] = {}
        for exp in experiences:
            assert exp.trajectory_id and exp.action_mask.all()
            by_trajectory.setdefault(exp.trajectory_id, []).append(exp)
        assert len(by_trajectory) == 4  # 2 tasks x 2 rollouts
        for steps in by_trajectory.values():
            count = steps[0].turn_count
            assert sorted(s.turn for s in steps) == list(range(count))
            assert {s.reward for s in steps} == {steps[0].reward}
