"""`run_workflows`: roll out a whole batch of tasks with as few engine calls as possible.

Every task's prompt is built by its workflow, then `engine.generate` runs once for all tasks ×
`repeat_times` (once per distinct (repeat_times, sampling settings) pair when tasks differ), and
each reply is scored. Tasks whose payload their workflow rejects are refused before any generation.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

from rft.engines.rollout import Rollout, RolloutEngine, SamplingParams
from rft.errors import EngineError, RftError, TasksetError
from rft.events.models import Task
from rft.rewards import REWARD_FUNCTIONS, RewardInfo
from rft.workflows.registry import WORKFLOWS
from rft.workflows.workflow import Workflow

log = logging.getLogger(__name__)

# Taskset rollout_args keys with no SamplingParams field that need no action: the engine always
# reports per-token logprobs.
IGNORED_ROLLOUT_ARGS = frozenset({"logprobs"})


class WorkflowResult(NamedTuple):
    """One task's rollouts (repeat_times of them) with their rewards and reward infos."""

    task: Task
    rollouts: list[Rollout]
    rewards: list[float]
    infos: list[RewardInfo]


class RejectedTasksError(TasksetError):
    """Some tasks cannot be run by their workflow; `rejected` maps task_id -> reason."""

    def __init__(self, rejected: dict[str, str]) -> None:
        self.rejected = rejected
        listed = "; ".join(f"{tid}: {why}" for tid, why in rejected.items())
        super().__init__(f"{len(rejected)} task(s) rejected before rollout: {listed}")


def workflow_for(task: Task, cache: dict[str, Workflow] | None = None) -> Workflow:
    """The workflow instance named by `task.workflow` (ConfigError if unknown)."""
    name = task.workflow or "math_workflow"
    if cache is not None and name in cache:
        return cache[name]
    workflow = WORKFLOWS.get(name)()
    if cache is not None:
        cache[name] = workflow
    return workflow


def split_runnable(tasks: Sequence[Task]) -> tuple[list[Task], dict[str, str]]:
    """Tasks their workflow accepts, and task_id -> reason for the others (for a dead letter)."""
    cache: dict[str, Workflow] = {}
    runnable: list[Task] = []
    rejected: dict[str, str] = {}
    for task in tasks:
        try:
            workflow = workflow_for(task, cache)
            REWARD_FUNCTIONS.get(workflow.reward_fn_name(task))
            problem = workflow.check_payload(task.payload, task.format)
        except RftError as exc:
            problem = str(exc)
        if problem:
            rejected[task.task_id] = problem
        else:
            runnable.append(task)
    return runnable, rejected


def sampling_params_for(task: Task, base: SamplingParams) -> SamplingParams:
    """`base` with n = task.repeat_times and the task's rollout_args that SamplingParams knows.

    Trinity's `top_k: -1` (off) becomes 0 (off here).
    """
    known = {f.name for f in dataclasses.fields(SamplingParams)} - {"n"}
    overrides: dict[str, Any] = {}
    for key, value in task.rollout_args.items():
        if key in known and value is not None:
            overrides[key] = value
        elif key not in IGNORED_ROLLOUT_ARGS and key not in known:
            log.warning(
                "task %s: rollout_args.%s has no sampling setting; ignored", task.task_id, key
            )
    if overrides.get("top_k", 0) < 0:
        overrides["top_k"] = 0
    if "stop" in overrides:
        overrides["stop"] = tuple(overrides["stop"])
    return dataclasses.replace(base, n=task.repeat_times, **overrides)


def run_workflows(
    tasks: Sequence[Task], engine: RolloutEngine, params: SamplingParams
) -> list[WorkflowResult]:
    """Roll out and score `tasks`; results follow the order of `tasks`.

    Raises RejectedTasksError (before generating anything) if any task's payload does not fit
    its workflow; use `split_runnable` first to set such tasks aside.
    """
    runnable, rejected = split_runnable(tasks)
    if rejected:
        raise RejectedTasksError(rejected)
    cache: dict[str, Workflow] = {}
    prompts: list[list[int]] = []
    prefixes: list[str] = []
    groups: dict[SamplingParams, list[int]] = {}
    for position, task in enumerate(tasks):
        workflow = workflow_for(task, cache)
        prompt = engine.chat_prompt_ids(workflow.messages(task))
        prefix = workflow.reply_prefix(task)
        if prefix:
            prompt = prompt + list(engine.tokenizer.encode(prefix, add_special_tokens=False))
        prompts.append(prompt)
        prefixes.append(prefix)
        groups.setdefault(sampling_params_for(task, params), []).append(position)

    rollouts: list[list[Rollout]] = [[] for _ in tasks]
    for group_params, positions in groups.items():
        outputs = engine.generate([prompts[p] for p in positions], group_params)
        if len(outputs) != len(positions):
            raise EngineError(
                f"engine returned {len(outputs)} rollout lists for {len(positions)} prompts"
            )
        for position, produced in zip(positions, outputs, strict=True):
            if len(produced) != group_params.n:
                raise EngineError(
                    f"task {tasks[position].task_id}: engine returned {len(produced)} rollouts, "
                    f"expected {group_params.n}"
                )
            rollouts[position] = list(produced)

    results = []
    for position, task in enumerate(tasks):
        workflow = workflow_for(task, cache)
        rewards: list[float] = []
        infos: list[RewardInfo] = []
        for rollout in rollouts[position]:
            try:
                reward, info = workflow.score(task, prefixes[position] + rollout.text)
            except TasksetError as exc:
                raise TasksetError(f"task {task.task_id}: {exc}") from exc
            rewards.append(reward)
            infos.append(info)
        results.append(WorkflowResult(task, rollouts[position], rewards, infos))
    return results
