"""The spans of a task's trace: their names, and the helpers that more than one module uses.

One trace per task, across processes (the W3C context rides in each event's Kafka headers):

    task.publish                          publisher or task feeder, one root span per task
    └─ explorer.rollout                   the task's rollout (per attempt), linked to explorer.step
       ├─ explorer.reward                 scoring its rollouts
       └─ explorer.produce                its experiences written (their headers carry this span)
          └─ trainer.consume              one per experience read by the trainer
    trainer.step                          a root span per optimizer step, linked to the
                                          trainer.consume span of every experience it trained on
    └─ trainer.publish                    a weight version (linked to every step it holds)
       ├─ trainer.checkpoint_upload       files, then the manifest, to the checkpoint store
       └─ trainer.announce                the WeightVersion event (its headers carry this span)
    explorer.load_weights                 each explorer's load of a version, a root span linked
                                          to that version's trainer.announce

A step trains many tasks' experiences and a version holds many steps, so those join the task
traces by links, not by parenthood. Batched rollouts: the engine generates a chunk of tasks in one
call; each task still gets its own `explorer.rollout` span, child of its own publish span, timed
from the chunk's generate call to the end of its scoring, with `rft.chunk_tasks` saying how many
tasks shared the call and a link to the explorer's `explorer.step` span (which links back to every
task of the step).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind

PUBLISH = "task.publish"
EXPLORER_STEP = "explorer.step"
ROLLOUT = "explorer.rollout"
REWARD = "explorer.reward"
PRODUCE = "explorer.produce"
DEAD_LETTER = "explorer.dead_letter"
CONSUME = "trainer.consume"
TRAIN_STEP = "trainer.step"
PUBLISH_VERSION = "trainer.publish"
UPLOAD = "trainer.checkpoint_upload"
ANNOUNCE = "trainer.announce"
LOAD_WEIGHTS = "explorer.load_weights"
# a multi-turn workflow's turns and tool calls, inside the task's rollout
TURN = "explorer.turn"
TOOL_CALL = "explorer.tool_call"

_tracer = trace.get_tracer("rft.tasks")


def new_trace() -> Context:
    """An empty context: a span started in it is the root of a trace of its own."""
    return Context()


def link_to(context: Context, **attributes: str | int) -> Link | None:
    """A link to the span that `context` holds, or None when it holds none (no trace headers)."""
    span_context = trace.get_current_span(context).get_span_context()
    if not span_context.is_valid:
        return None
    return Link(span_context, attributes or None)


class PublishedTask(Protocol):
    """What a publish span records of a Task event (`rft.events.models.Task`, which the event
    plane, above tracing, defines)."""

    @property
    def task_id(self) -> str: ...
    @property
    def taskset(self) -> str: ...
    @property
    def epoch(self) -> int: ...
    @property
    def index(self) -> int: ...
    @property
    def repeat_times(self) -> int: ...
    @property
    def is_eval(self) -> bool: ...


@contextmanager
def publish_span(
    task: PublishedTask, topic: str, tracer: trace.Tracer | None = None
) -> Iterator[Span]:
    """The root span of `task`'s trace, current while its Task event is sent (so the event's
    headers carry it)."""
    with (tracer or _tracer).start_as_current_span(
        PUBLISH, context=new_trace(), kind=SpanKind.PRODUCER
    ) as span:
        span.set_attribute("rft.task_id", task.task_id)
        span.set_attribute("rft.taskset", task.taskset)
        span.set_attribute("rft.epoch", task.epoch)
        span.set_attribute("rft.index", task.index)
        span.set_attribute("rft.repeat_times", task.repeat_times)
        span.set_attribute("rft.is_eval", task.is_eval)
        span.set_attribute("messaging.destination.name", topic)
        yield span
