"""`RolloutSpans`: the per-task `explorer.rollout` and `explorer.reward` spans of one explorer step.

The engine generates a chunk of tasks in one call, so no span can be current around one task's
generation. `roll_out` reports when each item's engine call and scoring ran (`on_phase`), and
this module makes each task's spans afterwards with those times: `explorer.rollout`, a child of
the task's own context (from its Kafka headers), from the start of its chunk's generate call to
the end of its scoring, with `rft.chunk_tasks` tasks sharing the call and a link to the step's
span; under it `explorer.reward`, its scoring. A failed attempt's rollout span ends in an error
status; a retried task gets one rollout span per attempt, and the context of the attempt that
succeeded parents its `explorer.produce` span (`context_of`).

A multi-turn task's rollout span cannot wait for the end: the workflow makes a span per turn and
per tool call while it runs, and they belong under it. `start_driven` starts those rollout spans
before the call (the runner makes each one current in its task's workflow threads), and `record`
finishes them with the others.

Span attributes hold ids, sizes, versions and times; the prompt (the workflow's messages) and the
response texts only with `monitor.trace_content: true`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rft.tracing.otel import Context, Link, Status, StatusCode, trace
from rft.tracing.spans import REWARD, ROLLOUT
from rft.workflows.multi_turn_runner import drives_model
from rft.workflows.runner import PreparedTask, WorkflowResult

_tracer = trace.get_tracer("rft.explorer")

Attributes = Mapping[str, str | int | float | bool]


@dataclass
class PhaseTimes:
    """What `roll_out` reported for one call: position -> phase -> (start, end) in Unix ns."""

    times: dict[int, dict[str, tuple[int, int]]] = field(default_factory=dict)

    def record(self, position: int, phase: str, start_ns: int, end_ns: int) -> None:
        self.times.setdefault(position, {})[phase] = (start_ns, end_ns)

    def of(self, position: int, phase: str) -> tuple[int, int] | None:
        return self.times.get(position, {}).get(phase)


class RolloutSpans:
    """Makes the rollout spans of one step.

    parents: task id -> the task's trace context (a task without one starts a trace of its own).
    step_link: the explorer.step span each rollout span links to.
    attributes: set on every span (explorer id, run, step).
    trace_content: `monitor.trace_content`: add prompt and response text.
    """

    def __init__(
        self,
        parents: Mapping[str, Context],
        *,
        step_link: Link | None = None,
        attributes: Attributes | None = None,
        trace_content: bool = False,
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.parents = parents
        self.step_link = step_link
        self.attributes = dict(attributes or {})
        self.trace_content = trace_content
        self.tracer = tracer or _tracer
        self._succeeded: dict[str, Context] = {}

    def context_of(self, task_id: str) -> Context:
        """The context of the task's successful rollout span (else the task's own context)."""
        found = self._succeeded.get(task_id)
        if found is not None:
            return found
        return self.parents.get(task_id, Context())

    def start_driven(self, items: Sequence[PreparedTask]) -> dict[int, trace.Span]:
        """The rollout spans, started now, of the `items` whose workflow drives the model (by
        position): their turn and tool-call spans are made under them while they run."""
        return {
            position: self._start(item, time.time_ns())
            for position, item in enumerate(items)
            if drives_model(item.workflow)
        }

    def _start(self, item: PreparedTask, start_ns: int) -> trace.Span:
        return self.tracer.start_span(
            ROLLOUT,
            context=self.parents.get(item.task.task_id, Context()),
            links=[self.step_link] if self.step_link is not None else None,
            start_time=start_ns,
        )

    def record(
        self,
        items: Sequence[PreparedTask],
        outcomes: Sequence[WorkflowResult | Exception],
        times: PhaseTimes,
        *,
        call_start_ns: int,
        call_end_ns: int,
        attempt: int,
        model_version: int,
        started: Mapping[int, trace.Span] | None = None,
    ) -> None:
        """The spans of one `roll_out` call: `outcomes[i]` is what became of `items[i]`;
        `started`: the spans `start_driven` started for this call."""
        for position, (item, outcome) in enumerate(zip(items, outcomes, strict=True)):
            generate = times.of(position, "generate")
            reward = times.of(position, "reward")
            start = generate[0] if generate else call_start_ns
            end = reward[1] if reward else (generate[1] if generate else call_end_ns)
            task = item.task
            span = (started or {}).get(position) or self._start(item, start)
            for key, value in self.attributes.items():
                span.set_attribute(key, value)
            span.set_attribute("rft.task_id", task.task_id)
            span.set_attribute("rft.attempt", attempt)
            span.set_attribute("rft.chunk_tasks", len(items))
            span.set_attribute("rft.model_version", model_version)
            span.set_attribute("rft.repeat_times", task.repeat_times)
            span.set_attribute("rft.prompt_tokens", len(item.prompt))
            span.set_attribute("rft.max_tokens", item.params.max_tokens)
            if generate is not None:
                span.set_attribute("rft.generate_ms", (generate[1] - generate[0]) / 1e6)
            if self.trace_content and item.prompt:  # a multi-turn workflow builds its own
                span.set_attribute("rft.prompt", json.dumps(item.workflow.messages(task)))
            if isinstance(outcome, WorkflowResult):
                self._result(span, item, outcome, reward)
            else:
                span.set_status(Status(StatusCode.ERROR, f"{type(outcome).__name__}: {outcome}"))
            span.end(end_time=end)

    def _result(
        self,
        span: trace.Span,
        item: PreparedTask,
        result: WorkflowResult,
        reward: tuple[int, int] | None,
    ) -> None:
        trajectories = result.trajectories
        response_tokens = [len(t.response_ids) for t in trajectories]
        span.set_attribute("rft.rollouts", len(trajectories))
        span.set_attribute("rft.response_tokens", sum(response_tokens))
        span.set_attribute("rft.response_tokens_max", max(response_tokens, default=0))
        span.set_attribute("rft.finish_reasons", [t.finish_reason for t in trajectories])
        if self.trace_content:
            span.set_attribute("rft.responses", [t.response_text for t in trajectories])
        context = trace.set_span_in_context(span)
        self._succeeded[item.task.task_id] = context
        if reward is None:
            return
        scoring = self.tracer.start_span(REWARD, context=context, start_time=reward[0])
        for key, value in self.attributes.items():
            scoring.set_attribute(key, value)
        scoring.set_attribute("rft.task_id", item.task.task_id)
        scoring.set_attribute("rft.reward_fn", item.workflow.reward_fn_name(item.task))
        rewards = [t.reward for t in result.trajectories]
        scoring.set_attribute("rft.rewards", rewards)
        if rewards:
            scoring.set_attribute("rft.reward_mean", sum(rewards) / len(rewards))
        scoring.end(end_time=reward[1])
