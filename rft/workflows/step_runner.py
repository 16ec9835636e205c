"""`run_step`: one explorer step's rollouts under the explorer's limits.

- `explorer.runner_per_model`: tasks in flight on the engine at once. The batch is rolled out in
  chunks of that many tasks, one engine call per chunk (per distinct sampling settings in it).
- Prompt limits (`rft.engines.prompt_limits`): over-long prompts are truncated or refused, and
  every response is clamped to fit `model.max_model_len`. A multi-turn task's turns are held to
  them one by one (`PromptLimits.turn_params`): a turn over them ends its trajectory, truncated;
  a first prompt over them refuses the task, with no retry (it would be the same prompt again).
- `explorer.max_timeout` / `explorer.max_retry_times`: a task whose workflow overruns its time or
  raises is tried again, alone (so a chunk-mate's failure is never blamed on it twice), up to
  max_retry_times more times; then it is given up with the reason, for a dead letter.

Retries happen within the step. The step's transaction commits its batch's task offsets, and a
Kafka commit is a position per partition, not a set of records: a task left for a later step would
have to hold back the commits of every task after it in its partition, or be republished as a new
event. Retrying before the commit keeps the rule simple and exact: each task of a batch commits
with either its experiences or its dead letter, in the one transaction of its step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rft.engines.auxiliary_models import AuxiliaryModels
from rft.engines.prompt_limits import PromptLimits, PromptTooLongError, generation_prompt_len
from rft.engines.rollout import RolloutEngine, SamplingParams
from rft.errors import RftError
from rft.events.models import Task
from rft.tracing.otel import trace
from rft.workflows.deadline import (
    WorkflowFailedError,
    WorkflowTimeoutError,
    abandoned_calls,
    describe_failure,
)
from rft.workflows.rollout_spans import PhaseTimes, RolloutSpans
from rft.workflows.runner import (
    PreparedTask,
    WorkflowResult,
    prepare_task,
    reply_prefix_ids,
    roll_out,
)
from rft.workflows.workflow import Workflow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepLimits:
    """How a step's tasks are run: chunk size, per-task time, retries and prompt limits."""

    runner_per_model: int = 8
    max_timeout: float | None = None  # seconds per task; None: no limit
    max_retry_times: int = 0
    prompts: PromptLimits | None = None

    def __post_init__(self) -> None:
        if self.runner_per_model < 1:
            raise ValueError(f"runner_per_model must be >= 1, got {self.runner_per_model}")


@dataclass
class StepOutcome:
    """Results of the tasks that succeeded, in task order, and why each other task is given up."""

    results: list[WorkflowResult] = field(default_factory=list)
    given_up: dict[str, RftError] = field(
        default_factory=dict
    )  # task_id -> the dead letter's error
    retries: int = 0  # attempts after a task's first
    timeouts: int = 0  # attempts that ran out of time
    failed_tasks: int = 0  # given up: every attempt failed, or the prompt could not be built
    truncated_prompts: int = 0
    refused_prompts: int = 0  # given up: the prompt does not fit the model's limits
    clamped_responses: int = 0  # max_tokens lowered to fit model.max_model_len

    def metrics(self) -> dict[str, float]:
        return {
            "retries": float(self.retries),
            "timeouts": float(self.timeouts),
            "failed_tasks": float(self.failed_tasks),
            "truncated_prompts": float(self.truncated_prompts),
            "refused_prompts": float(self.refused_prompts),
            "clamped_responses": float(self.clamped_responses),
            "abandoned_reward_calls": float(abandoned_calls()),
        }


def run_step(
    tasks: Sequence[Task],
    engine: RolloutEngine,
    params: SamplingParams,
    limits: StepLimits,
    before_rollout: Callable[[list[str]], None] | None = None,
    spans: RolloutSpans | None = None,
    after_rollout: Callable[[list[str]], None] | None = None,
    auxiliary_models: AuxiliaryModels | None = None,
) -> StepOutcome:
    """Roll out and score `tasks` (all runnable: see `split_runnable`) under `limits`, their
    workflows holding `auxiliary_models` (the explorer's).

    `before_rollout(task_ids)` runs before each engine call (a chunk, or one retry): the
    explorer's sync loads weights announced since (fully_async) and records which version
    samples those tasks; `after_rollout(task_ids)` runs after it, when a remote engine has said
    which version answered. `spans` makes each task's rollout and reward spans, per attempt.
    """
    outcome = StepOutcome()
    ready = _prepare(tasks, engine, params, limits, outcome, auxiliary_models)
    done: dict[str, WorkflowResult] = {}
    last_error: dict[str, Exception] = {}

    def record(item: PreparedTask, got: WorkflowResult | Exception, attempt: int) -> None:
        tid = item.task.task_id
        if isinstance(got, WorkflowResult):
            done[tid] = got
            last_error.pop(tid, None)
            return
        if isinstance(got, PromptTooLongError):
            # a multi-turn task's first prompt over the limits: the same every attempt
            outcome.refused_prompts += 1
            outcome.given_up[tid] = got
            last_error.pop(tid, None)
            log.warning("task %s refused: %s", tid, got)
            return
        last_error[tid] = got
        if isinstance(got, WorkflowTimeoutError):
            outcome.timeouts += 1
        more = "; retrying" if attempt < limits.max_retry_times else ""
        log.warning(
            "task %s: attempt %d of %d failed: %s%s",
            tid,
            attempt + 1,
            limits.max_retry_times + 1,
            describe_failure(got),
            more,
        )

    size = limits.runner_per_model
    salts = len(ready) + 1  # seed salts: chunk index on the first pass, then one per retry
    for chunk_index, lo in enumerate(range(0, len(ready), size)):
        chunk = ready[lo : lo + size]
        if before_rollout is not None:
            before_rollout([item.task.task_id for item in chunk])
        got = _traced_roll_out(chunk, engine, limits, chunk_index, spans, attempt=0)
        if after_rollout is not None:
            after_rollout([item.task.task_id for item in chunk])
        for item, result in zip(chunk, got, strict=True):
            record(item, result, 0)
    for attempt in range(1, limits.max_retry_times + 1):
        for position, item in enumerate(ready):
            if item.task.task_id not in last_error:
                continue
            outcome.retries += 1
            salt = attempt * salts + position + 1
            if before_rollout is not None:
                before_rollout([item.task.task_id])
            (result,) = _traced_roll_out([item], engine, limits, salt, spans, attempt=attempt)
            if after_rollout is not None:
                after_rollout([item.task.task_id])
            record(item, result, attempt)
    for item in ready:
        tid = item.task.task_id
        if tid in done:
            outcome.results.append(done[tid])
        elif tid not in outcome.given_up:
            outcome.failed_tasks += 1
            outcome.given_up[tid] = _final_error(tid, last_error[tid], limits.max_retry_times)
    return outcome


def _traced_roll_out(
    items: list[PreparedTask],
    engine: RolloutEngine,
    limits: StepLimits,
    salt: int,
    spans: RolloutSpans | None,
    *,
    attempt: int,
) -> list[WorkflowResult | Exception]:
    """`roll_out`, and with `spans` the rollout spans of its items, timed as the call reports."""
    if spans is None:
        return roll_out(
            items,
            engine,
            timeout_s=limits.max_timeout,
            seed_salt=salt,
            prompt_limits=limits.prompts,
        )
    times = PhaseTimes()
    version = engine.model_version  # the call samples with the weights loaded before it
    started = time.time_ns()
    live = spans.start_driven(items)
    got = roll_out(
        items,
        engine,
        timeout_s=limits.max_timeout,
        seed_salt=salt,
        on_phase=times.record,
        prompt_limits=limits.prompts,
        contexts={p: trace.set_span_in_context(span) for p, span in live.items()},
    )
    spans.record(
        items,
        got,
        times,
        call_start_ns=started,
        call_end_ns=time.time_ns(),
        attempt=attempt,
        model_version=version,
        started=live,
    )
    return got


def _prepare(
    tasks: Sequence[Task],
    engine: RolloutEngine,
    params: SamplingParams,
    limits: StepLimits,
    outcome: StepOutcome,
    auxiliary_models: AuxiliaryModels | None = None,
) -> list[PreparedTask]:
    """Prompts and sampling settings of `tasks` within the prompt limits; the rest given up."""
    cache: dict[str, Workflow] = {}
    ready = []
    for task in tasks:
        try:
            item = prepare_task(task, engine, params, cache, auxiliary_models)
            if limits.prompts is not None:
                item = _fit(item, engine, limits.prompts, outcome)
        except PromptTooLongError as exc:
            outcome.refused_prompts += 1
            outcome.given_up[task.task_id] = PromptTooLongError(f"task {task.task_id}: {exc}")
            log.warning("task %s refused: %s", task.task_id, exc)
            continue
        except Exception as exc:
            # building a prompt is deterministic (payload, format, template): no retry helps
            outcome.failed_tasks += 1
            outcome.given_up[task.task_id] = WorkflowFailedError(
                f"task {task.task_id}: its prompt could not be built: {describe_failure(exc)}"
            )
            continue
        ready.append(item)
    return ready


def _fit(
    item: PreparedTask, engine: RolloutEngine, limits: PromptLimits, outcome: StepOutcome
) -> PreparedTask:
    prompt = item.prompt
    if len(prompt) > limits.max_prompt_tokens:
        protected = generation_prompt_len(
            engine, item.workflow.messages(item.task), item.chat_template
        ) + len(reply_prefix_ids(engine, item.prefix))
        prompt = limits.fit(prompt, protected)
        outcome.truncated_prompts += 1
    params = limits.response_params(len(prompt), item.params)
    if params.max_tokens < item.params.max_tokens:
        outcome.clamped_responses += 1
    return PreparedTask(item.task, item.workflow, prompt, item.prefix, params)


def _final_error(task_id: str, last: Exception, retries: int) -> RftError:
    attempts = retries + 1
    last_text = describe_failure(last).removeprefix(f"task {task_id}: ")
    why = (
        f"task {task_id}: gave up after {attempts} attempt(s) "
        f"(explorer.max_retry_times is {retries}); last: {last_text}"
    )
    if isinstance(last, WorkflowTimeoutError):
        return WorkflowTimeoutError(why)
    return WorkflowFailedError(why)
