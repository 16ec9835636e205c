"""`run_workflows`: roll out a whole batch of tasks with as few engine calls as possible.

Every task's prompt is built by its workflow (with its format's `chat_template` when it names one),
then `engine.generate` runs once for all tasks × `repeat_times` (once per distinct (repeat_times,
sampling settings) pair when tasks differ), and each task's workflow turns its replies into scored
`Trajectory` objects. Tasks whose workflow drives the model itself (`drives_model = True`: a
multi-turn workflow) have no prompt built here; `rft.workflows.multi_turn_runner` runs their
rollouts concurrently over batched engine calls. Tasks whose payload their workflow rejects are
refused before any generation. `prepare_task` and `roll_out` are the pieces; `rft.workflows.step_runner` runs an
explorer step with them under its limits.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from rft.engines.auxiliary_models import AuxiliaryModels
from rft.engines.prompt_limits import PromptLimits
from rft.engines.rollout import Rollout, RolloutEngine, SamplingParams, moved_seed
from rft.errors import EngineError, RftError, TasksetError
from rft.events.models import Task
from rft.rewards import REWARD_FUNCTIONS
from rft.workflows.deadline import CallTimedOut, WorkflowTimeoutError, call_with_timeout
from rft.workflows.multi_turn_runner import MultiTurnItem, drives_model, roll_out_multi_turn
from rft.workflows.registry import WORKFLOWS
from rft.workflows.trajectory import Trajectory
from rft.workflows.workflow import Workflow

if TYPE_CHECKING:
    from rft.tracing.otel import Context

log = logging.getLogger(__name__)

# Taskset rollout_args keys with no SamplingParams field that need no action: the engine always
# reports per-token logprobs.
IGNORED_ROLLOUT_ARGS = frozenset({"logprobs"})


# (item position, phase "generate" or "reward", start, end in Unix ns): see `roll_out`
PhaseRecorder = Callable[[int, str, int, int], None]


class WorkflowResult(NamedTuple):
    """One task's scored trajectories (one per rollout: repeat_times of them single-turn)."""

    task: Task
    trajectories: list[Trajectory]


class RejectedTasksError(TasksetError):
    """Some tasks cannot be run by their workflow; `rejected` maps task_id -> reason."""

    def __init__(self, rejected: dict[str, str]) -> None:
        self.rejected = rejected
        listed = "; ".join(f"{tid}: {why}" for tid, why in rejected.items())
        super().__init__(f"{len(rejected)} task(s) rejected before rollout: {listed}")


def workflow_for(
    task: Task,
    cache: dict[str, Workflow] | None = None,
    auxiliary_models: AuxiliaryModels | None = None,
) -> Workflow:
    """The workflow instance named by `task.workflow` (ConfigError if unknown), holding
    `auxiliary_models` (the explorer's) when given."""
    name = task.workflow or "math_workflow"
    if cache is not None and name in cache:
        return cache[name]
    workflow = WORKFLOWS.get(name)()
    if auxiliary_models is not None:
        workflow.auxiliary_models = auxiliary_models
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


@dataclass
class PreparedTask:
    """A task with its workflow, prompt ids (reply prefix included) and sampling settings."""

    task: Task
    workflow: Workflow
    prompt: list[int]
    prefix: str
    params: SamplingParams

    @property
    def chat_template(self) -> str | None:
        return task_chat_template(self.task)


def task_chat_template(task: Task) -> str | None:
    """The task's own chat template (its taskset's `format.chat_template`), if any."""
    return task.format.get("chat_template") or None


def prepare_task(
    task: Task,
    engine: RolloutEngine,
    params: SamplingParams,
    cache: dict[str, Workflow],
    auxiliary_models: AuxiliaryModels | None = None,
) -> PreparedTask:
    """Build `task`'s prompt with its workflow (holding `auxiliary_models`) and its sampling
    settings from `params`.

    A workflow that drives the model builds its prompts turn by turn: its prompt here is empty."""
    workflow = workflow_for(task, cache, auxiliary_models)
    if drives_model(workflow):
        return PreparedTask(task, workflow, [], "", sampling_params_for(task, params))
    prompt = engine.chat_prompt_ids(workflow.messages(task), chat_template=task_chat_template(task))
    prefix = workflow.reply_prefix(task)
    prompt = prompt + reply_prefix_ids(engine, prefix)
    return PreparedTask(task, workflow, prompt, prefix, sampling_params_for(task, params))


def reply_prefix_ids(engine: RolloutEngine, prefix: str) -> list[int]:
    if not prefix:
        return []
    return [int(i) for i in engine.tokenizer.encode(prefix, add_special_tokens=False)]


def salted(params: SamplingParams, salt: int) -> SamplingParams:
    """`params` with a seed of its own for call `salt` (salt 0 keeps the seed as it is)."""
    if not salt or params.seed is None:
        return params
    return dataclasses.replace(params, seed=moved_seed(params.seed, salt))


def roll_out(
    items: Sequence[PreparedTask],
    engine: RolloutEngine,
    *,
    timeout_s: float | None = None,
    seed_salt: int = 0,
    on_phase: PhaseRecorder | None = None,
    prompt_limits: PromptLimits | None = None,
    contexts: Mapping[int, Context] | None = None,
) -> list[WorkflowResult | Exception]:
    """Generate and score `items`; per item, in order, its result or the exception that ended it.

    Items whose workflow drives the model go to `roll_out_multi_turn` (after the others, each
    instance with `timeout_s` of its own, each turn held to `prompt_limits`, and the item's
    context from `contexts`, by position, current while it runs); the rest are single-turn, one engine call per
    distinct SamplingParams. With `timeout_s`, the items are one batch in
    flight together, each with that much time: generation shares the clock (the engine stops
    at the deadline, and every item times out if generation reaches it, since none has time left
    to be scored); then each item's scoring gets the time left, its own, in a worker thread.
    `on_phase(position, phase, start_ns, end_ns)` hears when each item's engine call
    ("generate", shared by the items of one call) and its scoring ("reward") ran, in Unix ns.
    """
    driven = [p for p, item in enumerate(items) if drives_model(item.workflow)]
    if not driven:
        return _roll_out_single(items, engine, timeout_s, seed_salt, on_phase)
    single = sorted(set(range(len(items))) - set(driven))
    outcomes: list[WorkflowResult | Exception | None] = [None] * len(items)

    def shifted(positions: list[int]) -> PhaseRecorder | None:
        if on_phase is None:
            return None
        recorder = on_phase
        return lambda at, phase, start, end: recorder(positions[at], phase, start, end)

    if single:
        got = _roll_out_single(
            [items[p] for p in single], engine, timeout_s, seed_salt, shifted(single)
        )
        for position, outcome in zip(single, got, strict=True):
            outcomes[position] = outcome
    multi = [
        MultiTurnItem(items[p].task, items[p].workflow, salted(items[p].params, seed_salt))
        for p in driven
    ]
    ran = roll_out_multi_turn(
        multi,
        engine,
        timeout_s=timeout_s,
        on_phase=shifted(driven),
        prompt_limits=prompt_limits,
        contexts=None
        if contexts is None
        else {at: contexts[p] for at, p in enumerate(driven) if p in contexts},
    )
    for position, result in zip(driven, ran, strict=True):
        task = items[position].task
        outcomes[position] = (
            result if isinstance(result, Exception) else WorkflowResult(task, result)
        )
    return [o for o in outcomes if o is not None]


def _roll_out_single(
    items: Sequence[PreparedTask],
    engine: RolloutEngine,
    timeout_s: float | None,
    seed_salt: int,
    on_phase: PhaseRecorder | None,
) -> list[WorkflowResult | Exception]:
    started = time.monotonic()
    outcomes: list[WorkflowResult | Exception | None] = [None] * len(items)
    rollouts: list[list[Rollout]] = [[] for _ in items]
    groups: dict[SamplingParams, list[int]] = {}
    for position, item in enumerate(items):
        groups.setdefault(item.params, []).append(position)
    for group_params, positions in groups.items():
        call_params = salted(group_params, seed_salt)
        if timeout_s is not None:
            left = timeout_s - (time.monotonic() - started)
            if left <= 0:
                break
            call_params = dataclasses.replace(call_params, timeout_s=left)
        try:
            generate_start = time.time_ns()
            outputs = _generate(engine, [items[p].prompt for p in positions], call_params)
            if on_phase is not None:
                generate_end = time.time_ns()
                for position in positions:
                    on_phase(position, "generate", generate_start, generate_end)
            for position, produced in zip(positions, outputs, strict=True):
                if len(produced) != group_params.n:
                    raise EngineError(
                        f"task {items[position].task.task_id}: engine returned {len(produced)} "
                        f"rollouts, expected {group_params.n}"
                    )
                rollouts[position] = list(produced)
        except Exception as exc:  # the group's tasks failed; the caller decides on retries
            for position in positions:
                outcomes[position] = exc
    generation_s = time.monotonic() - started
    out_of_time = timeout_s is not None and (
        generation_s >= timeout_s
        or any(r.finish_reason == "timeout" for group in rollouts for r in group)
    )
    for position, item in enumerate(items):
        if outcomes[position] is not None:
            continue
        if out_of_time:
            outcomes[position] = WorkflowTimeoutError(
                f"task {item.task.task_id}: timed out after {timeout_s:g} s in generation"
            )
            continue
        scoring_s = None if timeout_s is None else timeout_s - generation_s
        try:
            outcomes[position] = call_with_timeout(
                functools.partial(_score, item, rollouts[position], position, on_phase),
                scoring_s,
                "reward-fn",
            )
        except CallTimedOut:
            outcomes[position] = WorkflowTimeoutError(
                f"task {item.task.task_id}: timed out after {timeout_s:g} s while its reward fn "
                f"{item.workflow.reward_fn_name(item.task)!r} scored it"
            )
        except Exception as exc:
            outcomes[position] = exc
    done = [o for o in outcomes if o is not None]
    assert len(done) == len(items), "every item ends with a result or an error"
    return done


def _generate(
    engine: RolloutEngine, prompts: list[list[int]], params: SamplingParams
) -> list[list[Rollout]]:
    outputs = engine.generate(prompts, params)
    if len(outputs) != len(prompts):
        raise EngineError(
            f"engine returned {len(outputs)} rollout lists for {len(prompts)} prompts"
        )
    return outputs


def _score(
    item: PreparedTask,
    rollouts: list[Rollout],
    position: int = 0,
    on_phase: PhaseRecorder | None = None,
) -> WorkflowResult:
    started = time.time_ns()
    result = _score_rollouts(item, rollouts)
    if on_phase is not None:
        on_phase(position, "reward", started, time.time_ns())
    return result


def _score_rollouts(item: PreparedTask, rollouts: list[Rollout]) -> WorkflowResult:
    task = item.task
    try:
        trajectories = item.workflow.trajectories(task, item.prefix, rollouts)
    except TasksetError as exc:
        raise TasksetError(f"task {task.task_id}: {exc}") from exc
    if not trajectories:
        raise RftError(
            f"task {task.task_id}: workflow {type(item.workflow).__name__} made no "
            f"trajectory of its {len(rollouts)} rollout(s)"
        )
    return WorkflowResult(task, list(trajectories))


def run_workflows(
    tasks: Sequence[Task],
    engine: RolloutEngine,
    params: SamplingParams,
    auxiliary_models: AuxiliaryModels | None = None,
) -> list[WorkflowResult]:
    """Roll out and score `tasks`, their workflows holding `auxiliary_models`; results follow
    the order of `tasks`.

    Raises RejectedTasksError (before generating anything) if any task's payload does not fit
    its workflow; use `split_runnable` first to set such tasks aside. Any other failure of a task
    is raised as it happened.
    """
    runnable, rejected = split_runnable(tasks)
    if rejected:
        raise RejectedTasksError(rejected)
    cache: dict[str, Workflow] = {}
    items = [prepare_task(task, engine, params, cache, auxiliary_models) for task in tasks]
    results = []
    for outcome in roll_out(items, engine):
        if isinstance(outcome, Exception):
            raise outcome
        results.append(outcome)
    return results
