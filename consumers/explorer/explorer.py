"""Explorer: a consumer-group member that turns Task events into Experience events.

Each step polls `buffer.batch_size` tasks, rolls every one out `repeat_times` times on the rollout
engine in batched calls of `explorer.runner_per_model` tasks, has each task's workflow turn its
replies into scored `Trajectory` objects (rft.workflows.trajectory), and writes one Experience per
trajectory, with its action mask, tagged with the weight version that produced it. `run` and
`_explore_step` read as the lists of their phases, each phase a method of its own. A task whose
workflow keeps failing or overrunning `explorer.max_timeout`, or whose prompt does not fit the
model, is parked in dead-letter (rft.workflows.step_runner). The experiences, the dead letters and
the task offsets commit in one Kafka transaction: a task is explored again only if its explorer
died before that commit. Weights follow the synchronizer (rft.consumers.explorer.sync): before each
step the explorer waits for the version its sync style and the η bound require, and under
fully_async it also loads new versions between rollout chunks; each Experience carries the version
that sampled it. Tracing (rft.tracing.spans): each step is an `explorer.step` span linked to its
tasks; each task's rollout and reward spans continue the task's own trace
(rft.workflows.rollout_spans), and its experiences are written inside an `explorer.produce` span
under them, whose context their headers carry.

The explorer says what it does on the control topic (rft.producers.status_announcer): `running` when
it starts, a wait line while it waits long for tasks or weights, and `finished` when its loop
ends, with why: it ran its `total_steps`, its tasks ran out (`tasks_exhausted`, with the tasks its
group left uncommitted), or it was stopped. The trainer reads these to know when no more
experiences can come (rft.consumers.trainer.explorer_roster).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from rft.config import RftConfig
from rft.consumers.explorer.env_vars import apply_env_vars
from rft.consumers.explorer.evaluation import (
    correctness,
    eval_params,
    evaluate_tasksets,
    read_eval_tasks,
)
from rft.consumers.explorer.progress import progress_metadata, resumed_step
from rft.consumers.explorer.sync import ExplorerSync, StepSync
from rft.consumers.explorer.weight_follower import WeightFollower
from rft.consumers.run_plan import RunPlan
from rft.consumers.tasks.left import tasks_left
from rft.consumers.tasks.order import OrderedTasks, PartitionEnds, drop_revoked
from rft.contact.first_contact import require_kafka, require_object_store
from rft.engines.chat_template import check_chat_template, configured_chat_template
from rft.engines.prompt_limits import PromptLimits
from rft.engines.rollout import (
    ROLLOUT_ENGINES,
    RolloutEngine,
    SamplingParams,
    create_rollout_engine,
)
from rft.errors import (
    BrokerUnavailableError,
    FencedError,
    RecordTooLargeError,
    RftError,
    TasksetError,
    TransportError,
)
from rft.events.claims import Claims
from rft.events.codec import EventCodec
from rft.events.dead_letter import without_payload
from rft.events.models import DeadLetter, Experience, Task
from rft.events.reader import Envelope, EventReader
from rft.events.transport import (
    TopicPartitionOffset,
    TransactionError,
    kafka_backend,
    kafka_outage_window,
)
from rft.events.writer import EventWriter
from rft.fault_points import fault_point
from rft.producers.metric_emitter import MetricEmitter
from rft.producers.status_announcer import StatusAnnouncer
from rft.producers.task_selectors import is_online
from rft.synchronizer import build_sync_style
from rft.synchronizer.fast_path import explorer_end
from rft.tracing.otel import Link, SpanKind, Status, StatusCode, trace
from rft.tracing.spans import DEAD_LETTER, EXPLORER_STEP, PRODUCE, link_to, new_trace
from rft.workflows.rollout_spans import RolloutSpans
from rft.workflows.runner import WorkflowResult, split_runnable
from rft.workflows.step_runner import StepLimits, StepOutcome, run_step
from rft.workflows.trajectory import experiences_of, rollouts_in, step_metrics

log = logging.getLogger(__name__)

# A step's commit refused because a rebalance moved the group on is tried again this many times
COMMIT_ATTEMPTS = 3

tracer = trace.get_tracer("rft.explorer")


@dataclass
class ExplorerSummary:
    steps: int = 0  # the last step taken, counted from the run's start
    resumed_from: int = 0  # the step a restarted explorer continued after
    tasks: int = 0
    experiences: int = 0
    rejected_tasks: int = 0
    generated_tokens: int = 0
    rollout_seconds: float = 0.0
    eval_accuracy: dict[int, dict[str, float]] = field(default_factory=dict)


@dataclass
class ExplorerIO:
    """What a running explorer works with: its engine, its Kafka clients (open while it runs)
    and what it says on them."""

    engine: RolloutEngine
    tasks: EventReader
    tx: EventWriter  # transactional: a step's experiences, dead letters and task offsets
    plain: EventWriter  # metrics and status
    follower: WeightFollower
    metrics: MetricEmitter
    status: StatusAnnouncer
    sync: ExplorerSync


@dataclass
class StepWork:
    """One step as it goes through its phases (`Explorer._explore_step`)."""

    number: int
    batch: list[Envelope]
    ids: dict[str, str | int]  # run, explorer and step: on every span of the step
    spans: RolloutSpans | None = None  # its tasks' rollout spans, made with the step's span
    version: int = 0  # the engine's at the step's start; a task's own may be newer
    outcome: StepOutcome = field(default_factory=StepOutcome)
    rollout_s: float = 0.0  # compile time left out
    compile_s: float = 0.0
    sync: StepSync | None = None  # how the step's weights were chosen
    given_up: dict[str, RftError] = field(default_factory=dict)  # task id -> its dead letter's
    groups: list[tuple[WorkflowResult, list[Experience]]] = field(default_factory=list)
    sent: int = 0  # experiences committed
    refused: int = 0  # tasks dead-lettered for an oversized experience

    tasks: list[Envelope] = field(init=False)  # the batch's Task envelopes
    by_id: dict[str, Envelope] = field(init=False)  # and by task id

    def __post_init__(self) -> None:
        self.tasks = [e for e in self.batch if isinstance(e.event, Task)]
        self.by_id = {e.event.task_id: e for e in self.tasks}  # type: ignore[union-attr]


def default_explorer_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Explorer:
    def __init__(
        self,
        cfg: RftConfig,
        *,
        explorer_id: str | None = None,
        engine: RolloutEngine | None = None,
        idle_timeout_s: float = 60.0,
    ) -> None:
        self.cfg = cfg
        self.plan = RunPlan(cfg)
        self.explorer_id = explorer_id or default_explorer_id()
        self.idle_timeout_s = idle_timeout_s
        sync = cfg.synchronizer
        self.style = build_sync_style(
            sync.sync_style, sync.sync_interval, sync.sync_offset, sync.max_head_offpolicyness
        )
        self._engine = engine
        # built one by one on their first call; frozen: they never follow the weight versions
        self.auxiliary_models = self.plan.auxiliary_models()
        self.summary = ExplorerSummary()
        self._eval_tasks: dict[str, list[Task]] | None = None
        self._carried: list[Envelope] = []  # tasks polled to finish a rebalance, for next step
        self._claims: Claims  # this process's claim of its explorer id, made in run()
        # the tasks of this member's partitions, handed out in the order they were published
        self._order = OrderedTasks(
            PartitionEnds(cfg.stack.kafka, self.plan.explorer_group, self.plan.tasks_start)
        )

    # -- set-up -------------------------------------------------------------------------------

    @property
    def _loads_weights(self) -> bool:
        """Whether the engine's entry says it can load the trainer's versions."""
        engine_type = self.cfg.explorer.rollout_model.engine_type
        return ROLLOUT_ENGINES.spec(engine_type).loads_weights

    def _build_engine(self) -> RolloutEngine:
        return create_rollout_engine(
            self.cfg.explorer.rollout_model.engine_type, self.plan.rollout_engine_config()
        )

    def _configure_chat(self, engine: RolloutEngine) -> None:
        """The configured chat templates replace the tokenizer's; each is checked here, so a bad
        one stops the explorer naming its key instead of failing every task."""
        model = self.cfg.model
        template = configured_chat_template(model.custom_chat_template, model.chat_template_path)
        if template is not None:
            key = (
                "model.chat_template_path"
                if model.chat_template_path
                else "model.custom_chat_template"
            )
            check_chat_template(engine, template, key)
        engine.set_chat_template(
            template, enable_thinking=self.cfg.explorer.rollout_model.enable_thinking
        )
        inputs = self.cfg.buffer.explorer_input
        tasksets = [("buffer.explorer_input.taskset", inputs.taskset)] + [
            (f"buffer.explorer_input.eval_tasksets[{i}]", t)
            for i, t in enumerate(inputs.eval_tasksets)
        ]
        for path, taskset in tasksets:
            if taskset is not None and taskset.format.chat_template:
                check_chat_template(
                    engine, taskset.format.chat_template, f"{path}.format.chat_template"
                )

    def _base_params(self, step: int) -> SamplingParams:
        rm = self.cfg.explorer.rollout_model
        model = self.cfg.model
        return SamplingParams(
            max_tokens=model.max_response_tokens,
            seed=rm.seed * 1_000_003 + step,
            repetition_penalty=model.repetition_penalty,
            min_tokens=model.min_response_tokens,
        )

    def _step_limits(self) -> StepLimits:
        ex, model = self.cfg.explorer, self.cfg.model
        assert model.max_model_len is not None  # filled when the config is loaded
        return StepLimits(
            runner_per_model=ex.runner_per_model,
            max_timeout=ex.max_timeout,
            max_retry_times=ex.max_retry_times,
            prompts=PromptLimits(
                model.max_prompt_tokens, model.max_model_len, model.enable_prompt_truncation
            ),
        )

    # -- the loop -----------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> ExplorerSummary:
        """Explore until `total_steps` are taken, the tasks run out or `stop` is set; then say on
        the control topic why the loop ended."""
        stop = stop or threading.Event()
        engine = self._set_up()
        try:
            with self._connect(engine) as io:
                step = self._start(io)
                step, exhausted = self._explore(io, step, stop)
                self.summary.steps = step
                self._announce_end(io.status, step, self.plan.total_steps, exhausted=exhausted)
                io.plain.flush()
        finally:
            self.auxiliary_models.close()
        return self.summary

    def _set_up(self) -> RolloutEngine:
        """The checks before anything is read, then the engine with its chat templates."""
        # an address that never answers is a config error, found in seconds (first_contact.py)
        require_kafka(self.cfg.stack.kafka)
        require_object_store(self.plan.checkpoint_store().store, create_bucket=False)
        self.plan.ensure_topics(self.plan.explorer_experience_topic)
        self._check_partitions()
        apply_env_vars(self.cfg.explorer.env_vars)
        engine = self._engine or self._build_engine()
        self._configure_chat(engine)
        return engine

    @contextlib.contextmanager
    def _connect(self, engine: RolloutEngine) -> Iterator[ExplorerIO]:
        """The explorer's Kafka clients, open while it runs, with its explorer id claimed."""
        kafka, topics = self.cfg.stack.kafka, self.plan.topics
        with contextlib.ExitStack() as opened:
            tasks = opened.enter_context(
                EventReader.open(
                    kafka,
                    self.plan.explorer_group,
                    [topics.tasks],
                    from_beginning=self.plan.tasks_start.kind != "latest",
                    dead_letter_topic=topics.dead_letter,
                    config=self.plan.explorer_consumer_config(self.explorer_id),
                )
            )
            tx = opened.enter_context(
                EventWriter.open(
                    kafka, transactional_id=self.plan.explorer_transactional_id(self.explorer_id)
                )
            )
            plain = opened.enter_context(EventWriter.open(kafka))
            follower = opened.enter_context(
                WeightFollower(
                    kafka,
                    topics.weights,
                    f"{self.plan.run_id}.weights.{self.explorer_id}",
                    self.plan.checkpoint_store(),
                    consumer_config=self.plan.consumer_config,
                    explorer_id=self.explorer_id,
                    dead_letter_topic=topics.dead_letter,
                    fast=explorer_end(
                        self.cfg.synchronizer, self.explorer_id, self.plan.explorer_device
                    )
                    if self._loads_weights
                    else None,
                )
            )
            self._claim(tx, tasks)
            yield self._io(engine, tasks, tx, plain, follower)

    def _claim(self, tx: EventWriter, tasks: EventReader) -> None:
        """Claim the explorer id now, not at the first step's commit: an explorer process already
        running with this id is fenced at once (its next transaction fails)."""
        transactional_id = self.plan.explorer_transactional_id(self.explorer_id)
        self._claims = Claims(self.cfg.stack.kafka, self.plan.topics.control, transactional_id)
        self._claims.claim(tx)
        tasks.check_fences_with(lambda: self._taken_over(tx))
        log.info(
            "explorer %s holds transactional id %r: an earlier process with this id is fenced",
            self.explorer_id,
            transactional_id,
        )

    def _io(
        self,
        engine: RolloutEngine,
        tasks: EventReader,
        tx: EventWriter,
        plain: EventWriter,
        follower: WeightFollower,
    ) -> ExplorerIO:
        """The open clients with what the explorer says on them: metrics, status and sync."""
        topics = self.plan.topics
        metrics = MetricEmitter(
            plain,
            topics.metrics,
            "explorer",
            self.plan.run_id,
            tags={"explorer_id": self.explorer_id, "explorer_group": self.plan.explorer_group},
        )
        status = StatusAnnouncer(
            plain,
            topics.control,
            "explorer",
            self.explorer_id,
            self.plan.explorer_group,
            self.plan.total_steps,
            experience_topic=self.plan.explorer_experience_topic,
            group_size=self.plan.explorer_count,
        )
        sync = ExplorerSync(
            self.cfg.synchronizer,
            self.style,
            follower,
            explorer_id=self.explorer_id,
            control_topic=topics.control,
            weights_topic=topics.weights,
            status=status,
            loads_weights=self._loads_weights,
        )
        return ExplorerIO(engine, tasks, tx, plain, follower, metrics, status, sync)

    def _start(self, io: ExplorerIO) -> int:
        """Load the weights to start from, find the step to resume after and announce `running`
        (a restart replaces this explorer's earlier `finished` before it does anything)."""
        io.follower.poll(timeout_s=1.0)
        if self.cfg.continue_from_checkpoint and self._loads_weights:
            io.follower.load_newest(io.engine, from_group=False)  # a restart starts durable
        if not self._loads_weights:
            log.info(
                "explorer %s: engine %s answers with its server's weights: no version is loaded "
                "or waited for (synchronizer requirements are not held); each experience carries "
                "the version its server said answered",
                self.explorer_id,
                self.cfg.explorer.rollout_model.engine_type,
            )
        step = self._resumed_step(io.tasks)
        self.summary.resumed_from = step
        io.status.announce("running", step=step)
        if self.cfg.explorer.eval_on_startup:
            self._evaluate(io.engine, io.metrics, step=step)
        return step

    def _resumed_step(self, tasks: EventReader) -> int:
        """The step a restarted explorer continues after (0 for a fresh start); a new group
        whose `explorer.tasks_from` names a moment first reads from there."""
        committed = self._group_committed()
        start = self.plan.tasks_start
        if not committed and start.kind == "timestamp":
            assert start.timestamp_ms is not None
            tasks.seek_to_timestamp(start.timestamp_ms)
        step = resumed_step(committed) if self.cfg.continue_from_checkpoint else 0
        if step:
            log.info(
                "resuming at step %d of %d (from the group's committed task offsets)",
                step,
                self.plan.total_steps,
            )
        return step

    def _explore(self, io: ExplorerIO, step: int, stop: threading.Event) -> tuple[int, bool]:
        """Steps after `step` until total_steps or `stop`; returns the last step taken and
        whether the tasks ran out."""
        total_steps = self.plan.total_steps
        # seconds spent polling without a task since the last batch: the time spent waiting for
        # weights between polls is not idleness (a slow trainer would otherwise end the run, as
        # an explorer rejoining its group after a long wait polls empty once)
        idle_s = 0.0
        ran_dry = False
        waits = io.status.waits(step)
        while step < total_steps and not stop.is_set():
            # after a batch the tasks could not fill, the next step's weights may need a batch
            # that cannot come: see first whether any task is left
            if ran_dry and self._group_took_all():
                log.info(
                    "no tasks left after a short batch: explorer group %s has committed every "
                    "task of %s",
                    self.plan.explorer_group,
                    self.plan.topics.tasks,
                )
                return step, True
            io.sync.before_step(step + 1, io.engine, io.plain)
            polled = time.monotonic()
            batch = self._poll_batch(io.tasks, stop)
            if not batch:
                idle_s += time.monotonic() - polled
                if self._tasks_ran_out(idle_s):
                    return step, True
                waits.still(
                    f"tasks on {self.plan.topics.tasks} for step {step + 1} of {total_steps} "
                    f"(explorer group {self.plan.explorer_group}; it stops after "
                    f"{self.idle_timeout_s:.0f}s without)",
                    step,
                )
                continue
            waits.over()
            idle_s = 0.0
            ran_dry = len(batch) < self.plan.batch_size
            if not self._explore_step(self._step_work(step + 1, batch), io):
                continue  # not committed: its tasks are read again
            step += 1
            if step % self.cfg.explorer.eval_interval == 0 or step == total_steps:
                self._evaluate(io.engine, io.metrics, step)
        return step, False

    def _tasks_ran_out(self, idle_s: float) -> bool:
        """After an empty poll, `idle_s` seconds of polling without a task: whether no task can
        come any more."""
        if idle_s > self.idle_timeout_s:
            log.info("no tasks for %.0fs: the taskset is exhausted", self.idle_timeout_s)
            return True
        if self._group_took_all():
            log.info(
                "no tasks left: explorer group %s has committed every task of %s",
                self.plan.explorer_group,
                self.plan.topics.tasks,
            )
            return True
        return False

    def _group_took_all(self) -> bool:
        """Whether the group has committed every task of a published taskset: then no task can
        come (a feeder's online tasks can: not for those). An empty topic is not published yet."""
        taskset = self.cfg.buffer.explorer_input.taskset
        if taskset is None or is_online(taskset.task_selector.selector_type):
            return False
        kafka, tasks_topic = self.cfg.stack.kafka, self.plan.topics.tasks
        try:
            with kafka_backend(kafka).admin() as admin:
                bounds = admin.partition_bounds([tasks_topic], committed=True)
            if all(b.high == b.low for b in bounds):
                return False
            # a long uncommitted stretch surely holds tasks: not read every few seconds
            left = tasks_left(kafka, tasks_topic, self.plan.explorer_group, read_at_most=1000)
        except TransportError as exc:
            # Kafka is away (an outage the clients ride out): not known now, asked again later
            log.info("cannot tell yet whether tasks are left: %s", exc)
            return False
        return left == 0

    def _announce_end(
        self, status: StatusAnnouncer, step: int, total_steps: int, *, exhausted: bool
    ) -> None:
        """Say on the control topic (and in the log) why this explorer's loop ended."""
        group = self.plan.explorer_group
        if step >= total_steps:
            reason, left = "total_steps", -1
            detail = f"explorer {self.explorer_id} ran its {total_steps} steps"
        elif exhausted:
            reason = "tasks_exhausted"
            left = tasks_left(self.cfg.stack.kafka, self.plan.topics.tasks, group) or 0
            detail = (
                f"explorer {self.explorer_id} found no more tasks at step {step} of "
                f"{total_steps}; explorer group {group} has {left} task(s) of "
                f"{self.plan.topics.tasks} left uncommitted"
            )
        else:
            reason, left = "stopped", -1
            detail = f"explorer {self.explorer_id} stopped at step {step} of {total_steps}"
        log.info("finished: %s (announced on %s)", detail, self.plan.topics.control)
        status.announce("finished", step=step, reason=reason, detail=detail, tasks_left=left)

    def _poll_batch(self, tasks: EventReader, stop: threading.Event) -> list[Envelope]:
        """Up to batch_size tasks, in the order they were published over all of this member's
        partitions (`OrderedTasks.batch`), what was carried over from a step cut short first.
        No transaction is open while this polls: each step's begins after its rollouts."""
        self._order.merge.add(self._carried)
        self._carried = []
        return self._order.batch(tasks, self.plan.batch_size, stop)

    def _taken_over(self, tx: EventWriter) -> bool:
        """Whether another process took this explorer id over, asked when the group fences this
        member. A process that takes the id over claims its transactional id first (Explorer.run),
        which fences this one's producer; a producer that can still commit an empty transaction
        means the broker fenced the membership on its own (a static member after a coordinator
        restart). When the claim cannot be made for another reason, the fence stands."""
        try:
            self._claims.hold(tx)
        except FencedError:
            return True
        except TransportError as exc:
            log.warning(
                "cannot tell whether explorer id %s was taken over: %s", self.explorer_id, exc
            )
            return True
        return False

    def _group_committed(self) -> list[TopicPartitionOffset]:
        """The group's committed task offsets (with each step's metadata), read by the admin
        client. The member's own consumer is not asked: before its first poll, with static
        membership and a cooperative assignor, librdkafka can hold its offset fetch until the
        group's rebalance completes, which waits for members that are not polling yet."""
        with kafka_backend(self.cfg.stack.kafka).admin() as admin:
            found = admin.group_offsets(self.plan.explorer_group)
        return [o for o in found if o.topic == self.plan.topics.tasks]

    def _check_partitions(self) -> None:
        """Warn when the tasks topic (made earlier, or by another config) has fewer partitions
        than this group is sized for: the members beyond them would get no tasks."""
        with kafka_backend(self.cfg.stack.kafka).admin() as admin:
            (info,) = admin.describe_topics([self.plan.topics.tasks])
        if len(info.partitions) < self.plan.explorer_count:
            log.warning(
                "%s has %d partition(s) but explorer group %s is sized for %d explorers "
                "(explorer.max_explorers / engine_num): members beyond %d get no tasks",
                info.name,
                len(info.partitions),
                self.plan.explorer_group,
                self.plan.explorer_count,
                len(info.partitions),
            )

    # -- a step ------------------------------------------------------------------------------

    def _step_work(self, number: int, batch: list[Envelope]) -> StepWork:
        """Step `number` of `batch`, with the ids every span of it carries."""
        ids: dict[str, str | int] = {
            "rft.run": self.plan.run_id,
            "rft.explorer_id": self.explorer_id,
            "rft.step": number,
        }
        return StepWork(number, batch, ids)

    def _explore_step(self, work: StepWork, io: ExplorerIO) -> bool:
        """Explore the step's batch and commit it; False when its transaction could not commit
        (it is aborted and the batch's tasks are read again)."""
        with self._step_trace(work, io.engine) as span:
            self._roll_out(work, io)
            self._make_experiences(work, io.sync)
            if not self._durable(work, io) or not self._commit(work, io):
                return False
            span.set_attribute("rft.experiences", work.sent)
        self._record_step(work, io)
        return True

    @contextlib.contextmanager
    def _step_trace(self, work: StepWork, engine: RolloutEngine) -> Iterator[trace.Span]:
        """The step's span: a trace of its own, linked to each of its tasks' traces (and they
        to it), under which each task's rollout spans are made (`work.spans`)."""
        links = [link_to(env.trace_context) for env in work.tasks]
        with tracer.start_as_current_span(
            EXPLORER_STEP, context=new_trace(), links=[link for link in links if link]
        ) as span:
            span.set_attributes(work.ids)
            span.set_attribute("rft.batch_tasks", len(work.tasks))
            span.set_attribute("rft.model_version", engine.model_version)
            work.spans = RolloutSpans(
                {tid: env.trace_context for tid, env in work.by_id.items()},
                step_link=Link(span.get_span_context()),
                attributes=work.ids,
                trace_content=self.cfg.monitor.trace_content,
            )
            yield span

    def _roll_out(self, work: StepWork, io: ExplorerIO) -> None:
        """Roll the step's tasks out under the explorer's limits; a task its workflow rejects,
        or that keeps failing, is given up (for a dead letter)."""
        engine = io.engine
        tasks: list[Task] = [env.event for env in work.by_id.values()]  # type: ignore[misc]
        runnable, rejected = split_runnable(tasks)
        compiled_before = engine.compile_seconds
        started = time.monotonic()
        work.version = engine.model_version  # at the step's start; a task's own may be newer
        work.outcome = run_step(
            runnable,
            engine,
            self._base_params(work.number),
            self._step_limits(),
            before_rollout=lambda ids: io.sync.between_rollouts(engine, ids),
            spans=work.spans,
            after_rollout=lambda ids: io.sync.after_rollouts(engine, ids),
            auxiliary_models=self.auxiliary_models,
        )
        # a compiling engine's first call on a new shape is reported apart from rollout time
        work.compile_s = engine.compile_seconds - compiled_before
        work.rollout_s = time.monotonic() - started - work.compile_s
        work.given_up = {
            task_id: TasksetError(f"task {task_id} rejected by its workflow: {why}")
            for task_id, why in rejected.items()
        }
        work.given_up.update(work.outcome.given_up)

    def _make_experiences(self, work: StepWork, sync: ExplorerSync) -> None:
        """Each rolled-out task's Experience group, tagged with the version that sampled it."""
        work.sync = sync.current
        task_versions = work.sync.task_versions if work.sync is not None else {}
        work.groups = [
            (
                result,
                self._experiences(result, task_versions.get(result.task.task_id, work.version)),
            )
            for result in work.outcome.results
        ]

    def _durable(self, work: StepWork, io: ExplorerIO) -> bool:
        """Whether every version the step sampled with is durable (received over the weight-sync
        group: announced, its manifest holding the token it came with). If one never becomes
        so, the step is not committed: its tasks are read again and explored on weights from
        the store."""
        versions = {exps[0].model_version for _, exps in work.groups if exps}
        why = io.follower.confirm(versions, self.cfg.synchronizer.sync_timeout)
        if why is None:
            return True
        log.warning(
            "step %d not committed: %s; its %d tasks are read again on weights from the store",
            work.number,
            why,
            len(work.batch),
        )
        self._read_again(io.tasks, work.batch)
        io.follower.fall_back(io.engine)
        return False

    def _commit(self, work: StepWork, io: ExplorerIO) -> bool:
        """Commit the step (`_commit_step`), again after a rebalance refused its offsets; False
        when it cannot commit: it is aborted and its tasks are read again."""
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                work.sent, work.refused = self._commit_step(work, io)
                return True
            except FencedError as exc:
                if self._claims.taken_over():
                    raise  # another process took this explorer id over: it commits no more
                # the broker fenced the producer on its own: nothing of the step is visible
                log.warning("step %d: %s; its tasks are read again", work.number, exc)
                self._claims.reclaim(io.tx)
                self._read_again(io.tasks, work.batch)
                return False
            except TransactionError as exc:
                if not exc.requires_abort or attempt == COMMIT_ATTEMPTS - 1:
                    self._redo(io.tx, io.tasks, work.number, work.batch, exc)
                    return False
                if not self._still_held(work, io, exc):
                    return False
            except TransportError as exc:
                self._redo(io.tx, io.tasks, work.number, work.batch, exc)
                return False
        raise AssertionError("the last commit attempt returns")

    def _still_held(self, work: StepWork, io: ExplorerIO, exc: TransactionError) -> bool:
        """After a rebalance moved the group to a new generation while the step ran (a member
        joined or left; cooperative rebalancing keeps this member's own partitions), which made
        the step's offsets refused: abort, poll once so the rebalance completes (its tasks wait
        for the next step) and keep only what is still held. Whether the step still holds all
        its tasks, to commit again; if not, its tasks are read again."""
        io.tx.abort()
        log.warning("step %d: %s; aborted, committing again", work.number, exc)
        self._carried += io.tasks.poll(self.plan.batch_size, timeout_s=1.0)
        lost = io.tasks.take_revoked()
        self._order.drop(lost)
        self._carried = drop_revoked(self._carried, lost)
        if not any((e.topic, e.partition) in lost for e in work.batch):
            return True
        # Some of the step's tasks went with a partition (to another member, or back to this
        # one at the committed offset): the step is done again whole, never committed short. A
        # short step would leave the trainer a batch short under a fixed schedule, and this
        # explorer would wait for a version that needs the missing experiences.
        kept = drop_revoked(work.batch, lost)
        log.warning(
            "step %d: %d of its %d tasks went with revoked partitions; done again",
            work.number,
            len(work.batch) - len(kept),
            len(work.batch),
        )
        self._read_again(io.tasks, kept)
        return False

    def _commit_step(self, work: StepWork, io: ExplorerIO) -> tuple[int, int]:
        """The step's experiences, dead letters and task offsets, in one transaction; returns
        (experiences sent, tasks refused for an oversized record). A task's experiences go whole
        or not at all: a group with a record over the producer's limit is dead-lettered."""
        tx, spans = io.tx, work.spans
        assert spans is not None  # made with the step's span
        tx.begin()
        sent = refused = 0
        oversized: dict[str, RftError] = {}
        topic = self.plan.explorer_experience_topic
        for result, experiences in work.groups:
            tid = result.task.task_id
            # the experiences' headers carry this span, a child of the task's rollout span
            with tracer.start_as_current_span(
                PRODUCE, context=spans.context_of(tid), kind=SpanKind.PRODUCER
            ) as produce:
                produce.set_attributes(work.ids)
                produce.set_attribute("rft.task_id", tid)
                produce.set_attribute("rft.model_version", experiences[0].model_version)
                produce.set_attribute("rft.experiences", len(experiences))
                produce.set_attribute("rft.group_id", experiences[0].group_id)
                produce.set_attribute("rft.experience_ids", [e.experience_id for e in experiences])
                produce.set_attribute("messaging.destination.name", topic)
                try:
                    records = [tx.prepare(topic, exp, key=exp.task_id) for exp in experiences]
                except RecordTooLargeError as exc:
                    produce.set_status(Status(StatusCode.ERROR, str(exc)))
                    oversized[tid] = RecordTooLargeError(f"task {tid}: an experience's {exc}")
                    refused += 1
                    continue
                for record in records:
                    tx.send_record(record)
                sent += len(records)
        work.given_up.update(oversized)
        for task_id, error in work.given_up.items():
            self._dead_letter(tx, work.by_id[task_id], error)
        fault_point("explorer.in_transaction")
        if work.batch:
            tx.send_offsets(io.tasks, work.batch, progress_metadata(work.number, self.explorer_id))
        tx.commit()
        return sent, refused

    def _redo(
        self,
        tx: EventWriter,
        tasks: EventReader,
        step: int,
        batch: list[Envelope],
        exc: TransportError,
    ) -> None:
        """After Kafka went away mid-transaction (an outage past the window raises OutageError
        instead): nothing of the step is visible, so it is aborted and its tasks are read again."""
        if isinstance(exc, BrokerUnavailableError) or getattr(exc, "retriable", False):
            # the broker is away: part of the process's Kafka outage (one line when it opens,
            # one when a later call succeeds; OutageError past stack.kafka.outage_timeout)
            kafka_outage_window(self.cfg.stack.kafka).failed(str(exc))
        log.warning(
            "step %d not committed (%s): aborting it; its %d tasks are read again",
            step,
            exc,
            len(batch),
        )
        tx.abort()
        self._read_again(tasks, batch)

    def _read_again(self, tasks: EventReader, batch: list[Envelope]) -> None:
        """Put the partitions of `batch` back to its first tasks; whatever this explorer had
        buffered or carried of them is dropped (it is read again from there)."""
        tasks.rewind(batch)
        rewound = {(e.topic, e.partition) for e in batch}
        self._order.drop(rewound)
        self._carried = [e for e in self._carried if (e.topic, e.partition) not in rewound]

    def _dead_letter(self, tx: EventWriter, env: Envelope, error: RftError) -> None:
        """Park a task that gets no experiences, inside the step's transaction."""
        with tracer.start_as_current_span(DEAD_LETTER, context=env.trace_context) as span:
            if isinstance(env.event, Task):
                span.set_attribute("rft.task_id", env.event.task_id)
            span.set_attribute("messaging.kafka.offset", env.offset)
            span.set_attribute("rft.error", str(error))
            span.set_status(Status(StatusCode.ERROR, str(error)))
            self._send_dead_letter(tx, env, error)
        log.warning(
            "%s[%d]@%d: %s; parked in dead-letter", env.topic, env.partition, env.offset, error
        )

    def _send_dead_letter(self, tx: EventWriter, env: Envelope, error: RftError) -> None:
        letter = DeadLetter.for_error(
            error,
            topic=env.topic,
            partition=env.partition,
            offset=env.offset,
            payload=EventCodec.default().encode(env.event),
            consumer=self.plan.explorer_group,
            key=env.key,
            headers=env.headers,
        )
        try:
            tx.send(self.plan.topics.dead_letter, letter, key=env.key)
        except RecordTooLargeError:  # the letter without the payload names where the original is
            tx.send(self.plan.topics.dead_letter, without_payload(letter), key=env.key)

    def _experiences(self, result: WorkflowResult, version: int) -> list[Experience]:
        """One Experience per trajectory of `result`: one group, its action masks as the
        workflow made them. Steps of a step-wise rollout (schema v4) name their trajectory,
        turn and turn count, and the group counts rollouts, not steps."""
        task = result.task
        group_id = f"{task.task_id}:{self.explorer_id}:{uuid.uuid4().hex[:8]}"
        return experiences_of(
            result.trajectories,
            id_prefix=group_id,
            task_id=task.task_id,
            group_id=group_id,
            group_size=rollouts_in(result.trajectories),
            explorer_id=self.explorer_id,
            model_version=version,
            explorer_group=self.plan.explorer_group,
        )

    def _record_step(self, work: StepWork, io: ExplorerIO) -> None:
        """Count the committed step in the summary and emit its metrics."""
        results = [r for r, _ in work.groups if r.task.task_id not in work.given_up]
        trajectories = [t for result in results for t in result.trajectories]
        rewards = np.array([t.reward for t in trajectories], dtype=np.float64)
        lengths = np.array([len(t.response_ids) for t in trajectories])
        tokens = sum(t.model_tokens for t in trajectories)
        rejected = len(work.given_up)
        s = self.summary
        s.tasks += len(results) + rejected
        s.experiences += int(rewards.size)
        s.rejected_tasks += rejected
        s.generated_tokens += tokens
        s.rollout_seconds += work.rollout_s
        values = (
            {
                "model_version": float(work.version),
                "tasks": float(len(results)),
                "rejected_tasks": float(rejected),
                "rollout_time_s": work.rollout_s,
                "rollout_tokens_per_s": tokens / work.rollout_s if work.rollout_s > 0 else 0.0,
            }
            | work.outcome.metrics()
            | (work.sync.metrics(io.sync.counters) if work.sync is not None else {})
            | {
                "model_version_end": float(io.engine.model_version),
                "rollout_compile_s": work.compile_s,
                "oversized_experiences": float(work.refused),
            }
            | self.auxiliary_models.metrics()
        )
        if rewards.size:
            values |= {
                "reward_mean": float(rewards.mean()),
                "reward_std": float(rewards.std()),
                "accuracy": float(correctness(results).mean()),
                "response_length_mean": float(lengths.mean()),
                "response_length_max": float(lengths.max()),
            } | step_metrics(trajectories)
        io.metrics.emit(work.number, values)

    # -- evaluation ---------------------------------------------------------------------------

    def _load_eval_tasks(self) -> dict[str, list[Task]]:
        """Read the eval-tasks topic to its end once (it is published before explorers start)."""
        if self._eval_tasks is None:
            self._eval_tasks = read_eval_tasks(
                self.cfg.stack.kafka,
                self.plan.topics.eval_tasks,
                f"{self.plan.run_id}.eval-reader.{self.explorer_id}",
                expect_tasks=bool(self.cfg.buffer.explorer_input.eval_tasksets),
                dead_letter_topic=self.plan.topics.dead_letter,
            )
        return self._eval_tasks

    def _evaluate(self, engine: RolloutEngine, metrics: MetricEmitter, step: int) -> None:
        if not self.cfg.buffer.explorer_input.eval_tasksets:
            return
        with tracer.start_as_current_span("explorer.eval") as span:
            span.set_attribute("rft.step", step)
            result = evaluate_tasksets(
                engine,
                self._load_eval_tasks(),
                eval_params(self.cfg.model),
                at=f"step {step}",
                auxiliary_models=self.auxiliary_models,
            )
        self.summary.eval_accuracy[step] = result.accuracy
        metrics.emit(step, result.metric_values())
