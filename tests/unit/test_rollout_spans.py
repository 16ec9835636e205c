"""Per-task rollout spans of a batched explorer step (rft.workflows.rollout_spans): each task's
`explorer.rollout` is a child of its own publish span even when tasks share one engine call, its
`explorer.reward` lies inside it, a retried task gets a span per attempt, and prompt and response
text appear only with `monitor.trace_content`."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, StatusCode, get_current_span

from rft.engines.rollout import SamplingParams
from rft.tracing.spans import REWARD, ROLLOUT, publish_span
from rft.workflows.rollout_spans import RolloutSpans
from rft.workflows.step_runner import StepLimits, run_step
from tests.unit.test_step_runner import task
from tests.unit.test_workflows import CannedEngine


def traced_step(
    tasks: list[Any], limits: StepLimits, *, trace_content: bool = False
) -> tuple[dict[str, ReadableSpan], list[ReadableSpan], RolloutSpans, Any]:
    """Publish spans for `tasks`, then one traced step; (publish span by task id, the step's
    spans, the RolloutSpans, the outcome)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    parents = {}
    for t in tasks:
        with publish_span(t, "tasks", tracer=tracer) as span:
            parents[t.task_id] = span.get_span_context()
    published = {s.attributes["rft.task_id"]: s for s in exporter.get_finished_spans()}
    exporter.clear()
    with tracer.start_as_current_span("explorer.step") as step:
        spans = RolloutSpans(
            {
                tid: trace.set_span_in_context(trace.NonRecordingSpan(c))
                for tid, c in parents.items()
            },
            step_link=Link(step.get_span_context()),
            attributes={"rft.explorer_id": "ex-1", "rft.step": 7},
            trace_content=trace_content,
            tracer=tracer,
        )
        outcome = run_step(
            tasks, CannedEngine({"": ["the answer is 1"]}), SamplingParams(), limits, spans=spans
        )
    return published, list(exporter.get_finished_spans()), spans, outcome


def test_each_task_of_a_batched_call_gets_its_own_rollout_span_under_its_own_trace() -> None:
    tasks = [task(f"t{i}", repeat_times=3) for i in range(5)]
    published, spans, _, outcome = traced_step(tasks, StepLimits(runner_per_model=2))
    assert len(outcome.results) == 5
    rollouts = {s.attributes["rft.task_id"]: s for s in spans if s.name == ROLLOUT}
    assert set(rollouts) == {t.task_id for t in tasks}
    (step,) = [s for s in spans if s.name == "explorer.step"]
    for tid, rollout in rollouts.items():
        parent = published[tid].context
        assert rollout.context.trace_id == parent.trace_id  # the task's own trace
        assert rollout.parent is not None and rollout.parent.span_id == parent.span_id
        assert [link.context.span_id for link in rollout.links] == [step.context.span_id]
        assert rollout.attributes["rft.explorer_id"] == "ex-1"
        assert rollout.attributes["rft.rollouts"] == 3
        assert rollout.attributes["rft.response_tokens"] == 3 * len("the answer is 1")
        assert rollout.status.status_code is not StatusCode.ERROR
    # chunks of two tasks share one generate call: the same start, the chunk's size
    assert [rollouts[f"t{i}"].attributes["rft.chunk_tasks"] for i in range(5)] == [2, 2, 2, 2, 1]
    assert rollouts["t0"].start_time == rollouts["t1"].start_time
    assert rollouts["t1"].start_time != rollouts["t2"].start_time
    rewards = {s.attributes["rft.task_id"]: s for s in spans if s.name == REWARD}
    for tid, reward in rewards.items():
        rollout = rollouts[tid]
        assert reward.parent is not None and reward.parent.span_id == rollout.context.span_id
        assert rollout.start_time <= reward.start_time <= reward.end_time == rollout.end_time
        assert reward.attributes["rft.rewards"] == (1.0, 1.0, 1.0)
    assert set(rewards) == set(rollouts)


def test_text_is_traced_only_with_trace_content() -> None:
    tasks = [task("a")]
    for trace_content in (False, True):
        _, spans, _, _ = traced_step(tasks, StepLimits(), trace_content=trace_content)
        (rollout,) = [s for s in spans if s.name == ROLLOUT]
        attributes = dict(rollout.attributes)
        everything = " ".join(str(v) for s in spans for v in (s.attributes or {}).values())
        if trace_content:
            assert attributes["rft.responses"] == ("the answer is 1",)
            assert "q-a" in attributes["rft.prompt"]
        else:
            assert "rft.responses" not in attributes and "rft.prompt" not in attributes
            assert "the answer is" not in everything and "q-a" not in everything


def test_a_retried_task_has_a_span_per_attempt_and_produces_under_the_one_that_worked() -> None:
    tasks = [task("ok"), task("flaky", "flaky", payload={"fail_times": 1})]
    published, spans, rollout_spans, outcome = traced_step(tasks, StepLimits(max_retry_times=2))
    assert [r.task.task_id for r in outcome.results] == ["ok", "flaky"]
    flaky = sorted(
        (s for s in spans if s.name == ROLLOUT and s.attributes["rft.task_id"] == "flaky"),
        key=lambda s: s.attributes["rft.attempt"],
    )
    assert [s.attributes["rft.attempt"] for s in flaky] == [0, 1]
    assert flaky[0].status.status_code is StatusCode.ERROR
    assert "transient" in (flaky[0].status.description or "")
    assert flaky[1].status.status_code is not StatusCode.ERROR
    assert all(s.parent.span_id == published["flaky"].context.span_id for s in flaky)
    produce_parent = get_current_span(rollout_spans.context_of("flaky")).get_span_context()
    assert produce_parent.span_id == flaky[1].context.span_id
    # a task that never ran falls back to its own publish context
    unknown = get_current_span(rollout_spans.context_of("nope")).get_span_context()
    assert not unknown.is_valid
