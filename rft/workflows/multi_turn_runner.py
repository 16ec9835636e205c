"""`roll_out_multi_turn`: run the rollouts of tasks whose workflow drives the model, all at once.

A workflow that declares `drives_model = True` is given a model handle and loops turn by turn
itself: `run(task, model, params, index) -> list[Trajectory]`, one call per rollout (index 0 ..
repeat_times - 1, each with `params.n == 1`). Every (task, index) is one workflow instance in a
thread of its own, all holding handles of one `RequestBatcher`, so the instances' concurrent
requests become batched engine calls: a step of T tasks x R rollouts x K turns makes about K
call waves, not T x R x K calls.

Each instance gets `timeout_s` (`explorer.max_timeout`) from its start; one that overruns it is
abandoned as `rft.workflows.deadline.call_with_timeout` says, and its handle is closed so the
others never wait for it. A task's outcome is its trajectories, in index order, or the error of
its first instance that failed; `rft.workflows.step_runner` retries and dead-letters it as it does
single-turn tasks.

With `prompt_limits` (the explorer's `model` limits) each instance's handle is a
`LimitedModelHandle`: every turn's reply is clamped to model.max_model_len, and a turn whose
conversation is over the limits is refused before the engine sees it (the workflow ends the
trajectory there, truncated). With `contexts` (item position -> the task's rollout span, as a
context) that context is current in the item's instance threads, so the spans a workflow makes
(each turn, each tool call) join the task's trace.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from rft.engines.prompt_limits import PromptLimits, PromptTooLongError
from rft.engines.request_batcher import DEFAULT_WINDOW_S, BatchedModelHandle, RequestBatcher
from rft.engines.rollout import RolloutEngine, SamplingParams
from rft.errors import RftError, TasksetError
from rft.events.models import Task
from rft.tracing.otel import Context
from rft.tracing.otel import context as otel_context
from rft.workflows.deadline import CallTimedOut, WorkflowTimeoutError, call_with_timeout
from rft.workflows.model_handle import LimitedModelHandle
from rft.workflows.trajectory import Trajectory
from rft.workflows.workflow import Workflow

if TYPE_CHECKING:
    from rft.engines.model_handle import ModelHandle

# (item position, phase, start, end in Unix ns), as `rft.workflows.runner.PhaseRecorder`
PhaseRecorder = Callable[[int, str, int, int], None]


@dataclass(frozen=True)
class MultiTurnItem:
    """A task to roll out with its workflow and sampling settings (n = its rollouts)."""

    task: Task
    workflow: Workflow
    params: SamplingParams


class DrivesModel(Protocol):
    """What a workflow with `drives_model = True` offers the runner."""

    def run(
        self, task: Task, model: ModelHandle, params: SamplingParams, index: int
    ) -> list[Trajectory]: ...


def drives_model(workflow: Workflow) -> bool:
    """Whether `workflow` loops over the model itself (it declares `drives_model = True`)."""
    return bool(getattr(workflow, "drives_model", False))


def roll_out_multi_turn(
    items: Sequence[MultiTurnItem],
    engine: RolloutEngine,
    *,
    timeout_s: float | None = None,
    on_phase: PhaseRecorder | None = None,
    window_s: float | None = None,
    prompt_limits: PromptLimits | None = None,
    contexts: Mapping[int, Context] | None = None,
) -> list[list[Trajectory] | Exception]:
    """Per item, in order, its trajectories or the exception that ended it (see module doc).

    `on_phase(position, "generate", start, end)` hears when each item's instances ran, from the
    first one's start to the last one's end.
    """
    if window_s is None:
        window_s = DEFAULT_WINDOW_S
    instances = [(p, i) for p, item in enumerate(items) for i in range(item.params.n)]
    got: dict[tuple[int, int], list[Trajectory] | Exception] = {}
    spans: dict[int, list[int]] = {}
    with RequestBatcher(engine, window_s=window_s) as batcher:
        # every handle is live before any instance starts, so the first wave waits for all
        handles = [batcher.handle() for _ in instances]

        def one(slot: int) -> None:
            position, index = instances[slot]
            item = items[position]
            params = dataclasses.replace(item.params, n=1)
            started = time.time_ns()
            handle = handles[slot]
            run = functools.partial(
                _run_instance,
                item,
                handle,
                params,
                index,
                prompt_limits,
                None if contexts is None else contexts.get(position),
            )
            try:
                got[(position, index)] = call_with_timeout(run, timeout_s, "multi-turn workflow")
            except CallTimedOut:
                got[(position, index)] = WorkflowTimeoutError(
                    f"task {item.task.task_id}: rollout {index} timed out after {timeout_s:g} s"
                )
            except Exception as exc:
                got[(position, index)] = exc
            finally:
                handle.close()
                ended = time.time_ns()
                span = spans.setdefault(position, [started, ended])
                span[0], span[1] = min(span[0], started), max(span[1], ended)

        with ThreadPoolExecutor(max_workers=max(1, len(instances))) as pool:
            list(pool.map(one, range(len(instances))))
    outcomes: list[list[Trajectory] | Exception] = []
    for position, item in enumerate(items):
        if on_phase is not None and position in spans:
            on_phase(position, "generate", *spans[position])
        trajectories: list[Trajectory] = []
        failure: Exception | None = None
        for index in range(item.params.n):
            result = got[(position, index)]
            if isinstance(result, Exception):
                failure = result
                break
            trajectories.extend(result)
        if failure is None and not trajectories:
            failure = RftError(
                f"task {item.task.task_id}: workflow {type(item.workflow).__name__} made no "
                f"trajectory in its {item.params.n} rollout(s)"
            )
        outcomes.append(failure if failure is not None else trajectories)
    return outcomes


def _run_instance(
    item: MultiTurnItem,
    handle: BatchedModelHandle,
    params: SamplingParams,
    index: int,
    prompt_limits: PromptLimits | None,
    parent: Context | None,
) -> list[Trajectory]:
    workflow: DrivesModel = item.workflow  # type: ignore[assignment]
    model: ModelHandle = (
        handle if prompt_limits is None else LimitedModelHandle(handle, prompt_limits)
    )
    token = otel_context.attach(parent) if parent is not None else None
    try:
        with handle:
            trajectories = workflow.run(item.task, model, params, index)
    except PromptTooLongError:
        raise  # its own type: the step runner refuses the task rather than retrying it
    except TasksetError as exc:
        raise TasksetError(f"task {item.task.task_id}: {exc}") from exc
    finally:
        if token is not None:
            otel_context.detach(token)
    if not all(isinstance(t, Trajectory) for t in trajectories):
        raise RftError(
            f"task {item.task.task_id}: workflow {type(item.workflow).__name__}.run must return "
            f"a list of Trajectory, got {[type(t).__name__ for t in trajectories]}"
        )
    return list(trajectories)
