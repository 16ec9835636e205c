"""TrainerLoop: one trainer run in motion, and the owner of its moving state.

It holds the Kafka clients, the offset ledger, the sampler, the step trainer, the checkpointer
and the counters. `tick()` is one pass of the loop and reads top to bottom:

    answer sync requests -> ingest experiences -> train a ready batch -> publish if due

A weight version is written to the checkpoint store (files, then the manifest carrying the
consumed offsets, with the sampler's state under `trainer_state/`) and announced on the `weights`
topic. The trainer's producer is transactional with one id per run, so a second trainer fences
the first; everything it writes goes inside a transaction. A publish runs in this order:

    begin: take the version (weights copied, offsets, sampler state); its files start going up
      on the checkpoint writer's thread, and the loop goes on (it may train the next step)
    land (on this thread, at the first tick that finds the upload done or nothing to train,
      before the next version begins, and at once for the run's last version):
      begin the transaction; stage the WeightVersion and the group offsets; flush
      -> create the manifest if absent (the commit point) -> commit the transaction

So a store slower than a step costs the trainer nothing while batches are ready (fully_async);
an explorer that waits for each version (`fixed`) finds the trainer waiting too, and the version
lands as soon as its files are up. The trainer's producer is used from this thread only.

A fenced trainer fails at the flush (or at any step's metrics transaction before it), before
its manifest exists; a manifest another writer created first voids this one's version and
aborts its announcement. `resume` puts a restarted trainer back where its newest version left
off.

Tracing (rft.tracing.spans): each experience read gets a `trainer.consume` span in its task's
trace; each optimizer step is a `trainer.step` span linked to the consume spans of its batch;
each version is a `trainer.publish` span (under its last step, linked to all its steps) holding
`trainer.checkpoint_upload` and `trainer.announce`, whose context the WeightVersion's headers
carry.

An online run ends short, at once, when the explorers can send nothing more (`InputEnd`: their
statuses on the control topic, read into rft.consumers.trainer.explorer_roster, and the experience topic read
to its end) and no batch can form: the summary's `stop_reason` names why, with the step, the
experiences left against the batch and those dropped, and `rft train` exits SHORT_EXIT_CODE. The
idle timeout (`max_read_timeout`) remains for explorers that never say (crashed, or of another
run). While it waits for a batch it says on what, at most every 30 s (log and control topic).

An offline trainer (`rft train --from-topic`, rft.consumers.trainer.offline_input) runs the same loop over a
bounded range: its `admit` rule filters what is read, its range is saved with each version
(`extra_state`), and the run ends when the range is exhausted and no batch is ready.

Each version's saved state also holds its `trained_log`: the experience offsets its own steps
(those after its parent version) trained, with how many times, and the offsets they settled. Its
WeightVersion carries the same log (with the offsets settled ahead), so the weights topic keeps
it after retention (`trainer.max_checkpoints_to_keep`) prunes the version's files. A chain of
versions from the newest back through its parents is then the durable record of what the run
trained: steps lost with a killed trainer are not in it, and their redo is (the run checker,
`rft.consumers.ops.run_check`, reads it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rft.buffer.batch_metrics import batch_metrics
from rft.buffer.experience_pipeline import ExperiencePipeline
from rft.buffer.offset_ledger import OffsetLedger, from_ranges, to_ranges
from rft.buffer.sampler import Admitted, SampledBatch, Sampler
from rft.consumers.replay.mirror import ExperienceMirror
from rft.consumers.trainer.checkpoint import TrainerCheckpointer
from rft.consumers.trainer.explorer_roster import ExplorerRoster
from rft.consumers.trainer.train_step import StepTrainer
from rft.errors import FencedError, TransportError
from rft.events.claims import Claims
from rft.events.models import (
    ComponentStatus,
    Experience,
    ManifestEntry,
    SyncRequest,
    TopicOffset,
    TrainedLog,
    WeightVersion,
)
from rft.events.reader import Envelope, EventReader
from rft.events.transport import TopicPartitionOffset, TransactionError
from rft.events.writer import EventWriter
from rft.fault_points import fault_point
from rft.producers.metric_emitter import MetricEmitter
from rft.producers.status_announcer import StatusAnnouncer, WaitNotice
from rft.storage.checkpoint_manifest import CheckpointManifest
from rft.storage.trained_log import trained_log_of
from rft.synchronizer import SyncStyle
from rft.tracing.otel import Context, Link, NonRecordingSpan, Span, SpanContext, SpanKind, trace
from rft.tracing.spans import (
    ANNOUNCE,
    CONSUME,
    PUBLISH_VERSION,
    TRAIN_STEP,
    new_trace,
)

log = logging.getLogger(__name__)
tracer = trace.get_tracer("rft.trainer")

# `rft train`'s exit code when the run stopped before total_steps for want of experiences
SHORT_EXIT_CODE = 3

# Seconds between checks of whether the explorers can still send experiences (each may read the
# tasks topic and the experience topic's offsets)
END_CHECK_EVERY_S = 2.0


@dataclass
class TrainerSummary:
    steps: int = 0
    experiences: int = 0
    dropped_stale: int = 0
    published_versions: list[int] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    read: int = 0  # experiences read (this process; a resume reads its in-flight ones again)
    filtered: int = 0  # experiences the admit rule left out
    left_incomplete: int = 0  # at the end: experiences of incomplete groups, not trained
    left_untrained: int = 0  # at the end: experiences of complete groups, not trained
    input_ended: bool = False  # a bounded input (an offline range) was read to its end
    pipeline_dropped: int = 0  # experiences the experience pipeline's operators dropped
    stop_reason: str = ""  # total_steps, stop signal, input end, or why it stopped short
    short: bool = False  # it stopped before total_steps for want of experiences


class ExperienceSource(Protocol):
    """Where the loop reads experiences: the trainer's consumer group (an EventReader) online,
    a range of a topic offline (rft.consumers.trainer.offline_input)."""

    def poll(self, max_events: int = 500, timeout_s: float = 1.0) -> list[Envelope]: ...

    def seek(self, topic: str, partition: int, offset: int) -> None: ...

    def commit(self) -> object: ...


@dataclass
class _Publishing:
    """A version begun and not yet announced: what its announcement needs."""

    step: int
    span: Span  # trainer.publish, ended when the version is announced (or given up)
    context: Context  # the span's, for its children on either thread
    positions: list[TopicPartitionOffset]  # the group offsets its transaction commits
    trained: TrainedLog | None
    started: float


@dataclass
class InputEnd:
    """How the loop learns that no more experiences can come online: `roster` (the explorers'
    statuses) says why, `caught_up` whether everything committed on the topic is read, and
    `position` says where the reading stands, for wait lines."""

    roster: ExplorerRoster
    caught_up: Callable[[], bool]
    position: Callable[[], str]


@dataclass
class LoopClients:
    """The loop's connections: experiences in, sync requests and statuses in, events out."""

    experiences: ExperienceSource
    control: EventReader
    writer: EventWriter
    metrics: MetricEmitter
    weights_topic: str
    mirror: ExperienceMirror | None = None
    status: StatusAnnouncer | None = None  # this trainer's statuses on the control topic


class TrainerLoop:
    def __init__(
        self,
        clients: LoopClients,
        sampler: Sampler,
        step_trainer: StepTrainer,
        checkpoints: TrainerCheckpointer,
        style: SyncStyle,
        *,
        total_steps: int,
        idle_timeout_s: float,
        keep_checkpoints: int | None = None,
        versions_in_use: Callable[[], Collection[int] | None] | None = None,
        stop: threading.Event | None = None,
        run_id: str = "",
        admit: Callable[[Experience], Experience | None] | None = None,
        input_ended: Callable[[], bool] | None = None,
        extra_state: Mapping[str, Any] | None = None,
        claims: Claims | None = None,
        input_end: InputEnd | None = None,
        batch_size: int = 0,
        pipeline: ExperiencePipeline | None = None,
    ) -> None:
        self.clients = clients
        self.sampler = sampler
        self.step_trainer = step_trainer
        self.checkpoints = checkpoints
        self.style = style
        self.total_steps = total_steps
        self.idle_timeout_s = idle_timeout_s
        self.keep_checkpoints = keep_checkpoints
        self.versions_in_use = versions_in_use  # what retention must not delete
        self.stop = stop or threading.Event()
        self.admit = admit  # None keeps every experience as read
        self.input_ended = input_ended  # None: the input never ends (an online topic)
        self.extra_state = dict(extra_state or {})  # saved with each version beside the sampler's
        self.claims = claims  # the run's claim: tells a takeover from a fence the broker made
        self.input_end = input_end  # None: wait for experiences until idle_timeout_s
        self.batch_size = batch_size  # experiences a step trains (train_batch_size), for lines
        self.pipeline = pipeline  # data_processor.experience_pipeline; None: batches as sampled
        self.pipeline_values: dict[str, float] = {}  # the pipeline's, for the next step
        self.end_checked = 0.0
        self.waits = WaitNotice(clients.status)
        self.ledger = OffsetLedger()
        self.summary = TrainerSummary()
        self.step = 0
        self.last_published = 0
        self.sync_requested = False
        self.trained_last_tick = False
        self.previous_counters = sampler.counters.copy()
        self.idle_since = self.wait_started = time.monotonic()
        self.run_id = run_id
        # (topic, partition, offset) -> the trainer.consume span of an experience not yet let go
        self.consumed: dict[tuple[tuple[str, int], int], SpanContext] = {}
        self.unpublished_steps: list[SpanContext] = []  # train step spans since the last version
        # since the last publish: (topic, partition) -> offset -> times trained; offsets settled
        self.trained_since_publish: dict[tuple[str, int], dict[int, int]] = {}
        self.settled_since_publish: dict[tuple[str, int], list[int]] = {}
        self.resumed_log: TrainedLog | None = None  # of the version a restart resumed from
        self.publishing: _Publishing | None = None  # a version begun, not yet announced

    # -- the loop -------------------------------------------------------------------------------

    def resume(
        self,
        step: int,
        offsets: Mapping[tuple[str, int], int],
        saved: Mapping[str, Any] | None,
    ) -> None:
        """Continue after version `step`: read experiences from its offsets, skip the ones
        settled past them, and give the sampler its saved state."""
        self.step = self.last_published = step
        skip = {(t, int(p)): from_ranges(r) for t, p, r in (saved or {}).get("settled_ahead", [])}
        for tp, offset in offsets.items():
            self.clients.experiences.seek(tp[0], tp[1], offset)
            self.ledger.start(tp, offset, skip.get(tp, ()))
        self.sampler.restore((saved or {}).get("sampler", {}))
        self.resumed_log = trained_log_of(saved or {})
        self.previous_counters = self.sampler.counters.copy()

    def tick(self) -> bool:
        """One pass; False once the run is over (total steps, stop, idle too long, or a bounded
        input read to its end with no batch ready)."""
        if self.step >= self.total_steps or self.stop.is_set():
            self.summary.stop_reason = (
                f"total_steps ({self.total_steps})"
                if self.step >= self.total_steps
                else "stop signal"
            )
            return False
        self.read_control()
        # right after a step another batch may be ready (replay, a backlog): do not wait on Kafka
        read = self.ingest(wait_s=0.0 if self.trained_last_tick else 1.0)
        sampled = self.sampler.take_batch(self.step)
        batch = sampled if sampled is None else self.through_pipeline(sampled)
        # a version still going up is committed once it is, or now if there is nothing to train
        self.land(wait=batch is None)
        if batch is not None:
            self.train(batch)
        self.settle()
        if batch is not None and (self.style.should_publish(self.step) or self.finished):
            self.publish(final=self.finished)
        self.trained_last_tick = sampled is not None
        if read or sampled is not None:
            self.idle_since = time.monotonic()
        if sampled is None and self.input_ended is not None and self.input_ended():
            # nothing more will arrive and the sampler has no batch from what is here
            self.summary.stop_reason = "input end"
            log.info("the input is read to its end and no batch is ready: stopping")
            return False
        if sampled is not None:
            self.waits.over()
            return True
        ended = self.explorers_ended()
        if ended is not None:
            self.stop_short(f"{ended}, and nothing more is committed on the experience topic")
            return False
        self.waits.still(self.waiting_for, self.step)  # asked only when a line is due
        if self.idle_too_long():
            self.stop_short(
                f"no experiences and no batch for {self.idle_timeout_s:.0f}s "
                "(buffer.trainer_input.experience_buffer.max_read_timeout or --idle-timeout)"
            )
            return False
        return True

    def stop_short(self, why: str) -> None:
        """End the run before total_steps, saying why and what was left, with the numbers."""
        incomplete, untrained = self.sampler.waiting()
        need = self.batch_size
        counters = self.sampler.counters
        dropped = []
        if counters.dropped_stale:
            dropped.append(f"{counters.dropped_stale} dropped as too stale")
        if counters.filtered_experiences:
            dropped.append(f"{counters.filtered_experiences} filtered out (equal-reward groups)")
        self.summary.short = True
        self.summary.stop_reason = (
            f"stopped at step {self.step} of {self.total_steps}: {why}; "
            f"{untrained} of the {need} experiences needed for step {self.step + 1} remain"
            + (f" ({incomplete} more in incomplete groups)" if incomplete else "")
            + (f" ({', '.join(dropped)})" if dropped else "")
        )
        log.warning("%s", self.summary.stop_reason)

    def explorers_ended(self) -> str | None:
        """Why no more experiences can come (the explorers finished and everything they
        committed is read), or None while some may; checked every END_CHECK_EVERY_S."""
        if self.input_end is None:
            return None
        now = time.monotonic()
        if now - self.end_checked < END_CHECK_EVERY_S:
            return None
        self.end_checked = now
        try:
            why = self.input_end.roster.ended()
            if why is None or not self.input_end.caught_up():
                return None
        except TransportError as exc:
            # Kafka is away (an outage the clients ride out): unknown now, asked again later
            log.info("cannot tell yet whether the explorers ended: %s", exc)
            return None
        return why

    def waiting_for(self) -> str:
        """What a trainer without a batch waits for, with the numbers."""
        incomplete, untrained = self.sampler.waiting()
        text = (
            f"a full batch for step {self.step + 1} of {self.total_steps}: {untrained} of "
            f"{self.batch_size} experiences ready"
            + (f", {incomplete} in incomplete groups" if incomplete else "")
        )
        if self.input_end is not None:
            try:
                text += (
                    f"; reading {self.input_end.position()}; "
                    f"{self.input_end.roster.still_running()}"
                )
            except TransportError as exc:
                text += f"; where the explorers stand is unknown now ({exc})"
        return text

    def finish(self) -> TrainerSummary:
        """Publish what is unpublished (its version carries the training state) and report."""
        self.land(wait=True)
        if self.step > self.last_published:
            self.publish(final=True)
        self.checkpoints.wait_for_state()  # the last version's training state, written behind it
        incomplete, untrained = self.sampler.waiting()
        self.summary.left_incomplete, self.summary.left_untrained = incomplete, untrained
        self.summary.input_ended = self.input_ended is not None and self.input_ended()
        if incomplete or untrained:
            log.info(
                "stopping with %d experiences in incomplete groups and %d in complete groups "
                "not trained (or kept for replay); a restart reads them again",
                incomplete,
                untrained,
            )
        self.clients.writer.flush()
        self.summary.steps = self.step
        return self.summary

    @property
    def finished(self) -> bool:
        return self.step >= self.total_steps

    @property
    def newest_version(self) -> int:
        """The newest version begun: announced, or still going up."""
        return self.last_published if self.publishing is None else self.publishing.step

    # -- the steps of a tick --------------------------------------------------------------------

    def read_control(self) -> None:
        """Explorers' statuses go to the roster; explorers that sync on request
        (dynamic_by_explorer) get the newest step published."""
        for env in self.clients.control.poll(100, timeout_s=0.0):
            req = env.event
            if isinstance(req, ComponentStatus):
                if self.input_end is not None:
                    self.input_end.roster.saw_status(req)
                continue
            if not self.style.publishes_on_request:
                continue
            # older requests find their answer on the weights topic already
            if isinstance(req, SyncRequest) and req.current_version >= self.last_published:
                log.info(
                    "sync requested by %s at its step %d (it holds v%d)",
                    req.explorer_id,
                    req.step,
                    req.current_version,
                )
                self.sync_requested = True
        if self.sync_requested and self.step > self.newest_version:
            self.publish(final=False)

    def ingest(self, wait_s: float = 1.0) -> int:
        """Poll experiences into the ledger and the sampler; how many were read."""
        got = self.clients.experiences.poll(500, timeout_s=wait_s)
        self.check_claim_after_rebalance()
        if self.clients.mirror is not None:
            self.clients.mirror.write(e.event for e in got if isinstance(e.event, Experience))
        for env in got:
            tp = (env.topic, env.partition)
            if not self.ledger.polled(tp, env.offset):
                continue  # settled before a restart: trained, dropped or filtered already
            if isinstance(env.event, Experience):
                self.summary.read += 1
                exp = env.event if self.admit is None else self.admit(env.event)
                if exp is None:
                    self.summary.filtered += 1
                    self.ledger.settled(tp, env.offset)
                    continue
                self.consumed[(tp, env.offset)] = self._consume_span(env, exp)
                self.sampler.add(Admitted(exp, tp, env.offset))
                continue
            log.warning(
                "%s[%d]@%d: %s on the experience topic, skipped",
                env.topic,
                env.partition,
                env.offset,
                type(env.event).__name__,
            )
            self.ledger.settled(tp, env.offset)
        return len(got)

    def check_claim_after_rebalance(self) -> None:
        """A trainer that lost its partitions (its session expired in a pause or an outage) may
        have been replaced by another one meanwhile. It learns that now, from its producer (an
        empty transaction, which fails for a fenced one), and stops with the fence, instead of
        training and uploading a version while it holds partitions the newcomer needs."""
        reader = self.clients.experiences
        writer = self.clients.writer
        if not isinstance(reader, EventReader) or not reader.take_revoked():
            return
        if writer.in_transaction:
            return
        try:
            self.hold_claim()
        except FencedError:
            raise
        except TransportError as exc:
            log.warning("could not check the run's claim after a rebalance: %s", exc)

    def hold_claim(self) -> None:
        """Claim the run again: a takeover ends this trainer (FencedError); a fence the broker
        made on its own replaces the producer and goes on."""
        if self.claims is None:
            self.clients.writer.claim()
        else:
            self.claims.hold(self.clients.writer)

    def recovered_from_fence(self, exc: FencedError) -> bool:
        """After a fence in a publish or a step's metrics: True when it was the broker's own (no other process
        claimed the run since) and the producer was replaced; False for a takeover."""
        if self.claims is None or self.claims.taken_over():
            return False
        log.warning("trainer at step %d: %s", self.step, exc)
        self.claims.reclaim(self.clients.writer)
        return True

    def _consume_span(self, env: Envelope, exp: Experience) -> SpanContext:
        """A span, child of the experience's produce span, marking that the trainer read it;
        the train step that uses the experience links to it."""
        with tracer.start_as_current_span(
            CONSUME, context=env.trace_context, kind=SpanKind.CONSUMER
        ) as span:
            span.set_attributes(
                {
                    "rft.run": self.run_id,
                    "rft.experience_id": exp.experience_id,
                    "rft.task_id": exp.task_id,
                    "rft.explorer_id": exp.explorer_id,
                    "rft.model_version": exp.model_version,
                    "rft.response_tokens": len(exp.response_ids),
                    "messaging.destination.name": env.topic,
                    "messaging.destination.partition.id": str(env.partition),
                    "messaging.kafka.offset": env.offset,
                }
            )
            return span.get_span_context()

    def commit_for_monitoring(self) -> None:
        """Commit the group's offsets, which only tools like lag monitors read: resumes use the
        manifest's offsets, so a failed commit (e.g. after a rebalance) costs nothing to say."""
        try:
            self.clients.experiences.commit()
        except TransportError as exc:
            log.warning("group offset commit failed (resumes use the manifest's offsets): %s", exc)

    def through_pipeline(self, batch: SampledBatch) -> SampledBatch | None:
        """The batch through the experience pipeline (as sampled without one); None when the
        operators dropped every row: no step then (the pipeline says its counts with the next
        step's metrics). The dropped rows' offsets settle as the sampler let them go."""
        if self.pipeline is None:
            return batch
        kept, self.pipeline_values = self.pipeline.run(batch)
        self.summary.pipeline_dropped = self.pipeline.dropped_total
        if kept is None:
            log.warning(
                "the experience pipeline dropped all %d experiences of the batch for step %d; "
                "they count in the next step's pipeline/dropped",
                len(batch.rows),
                self.step + 1,
            )
        return kept

    def train(self, batch: SampledBatch) -> None:
        """One optimizer step on `batch`, and its metrics."""
        wait_s = time.monotonic() - self.wait_started
        self.step += 1
        links = [
            Link(self.consumed[(row.source.tp, row.source.offset)])
            for row in batch.rows
            if row.source is not None and (row.source.tp, row.source.offset) in self.consumed
        ]
        # a step trains many tasks' experiences: a trace of its own, linked to each one's consume
        with tracer.start_as_current_span(TRAIN_STEP, context=new_trace(), links=links) as span:
            span.set_attributes(
                {
                    "rft.run": self.run_id,
                    "rft.step": self.step,
                    "rft.batch_size": len(batch.rows),
                    "rft.version": batch.version,
                    "rft.expert_rows": sum(1 for r in batch.rows if r.expert),
                    "rft.experience_ids": [r.exp.experience_id for r in batch.rows],
                }
            )
            values = self.step_trainer.train(batch, self.step)
            span.set_attribute("rft.step_time_s", values["step_time_s"])
        self.unpublished_steps.append(span.get_span_context())
        fault_point("trainer.after_step")
        values |= batch_metrics(batch, self.previous_counters) | self.pipeline_values
        self.pipeline_values = {}
        values["wait_time_s"] = wait_s
        self.emit_step_metrics(values)
        self.commit_for_monitoring()
        self.summary.experiences += len(batch.rows)
        for row in batch.rows:
            if row.source is not None:
                counts = self.trained_since_publish.setdefault(row.source.tp, {})
                counts[row.source.offset] = counts.get(row.source.offset, 0) + 1
        self.summary.dropped_stale += (
            batch.counters.dropped_stale - self.previous_counters.dropped_stale
        )
        self.summary.step_seconds.append(values["step_time_s"])
        self.previous_counters = batch.counters
        self.wait_started = time.monotonic()

    def emit_step_metrics(self, values: dict[str, float]) -> None:
        """The step's metrics, in a transaction of its own: a fenced trainer learns it here, at the
        next step. Kafka failing it in an outage (a stalled producer given up, a transaction the
        broker aborted) aborts it and writes it again, for as long as the outage window allows,
        as `publish` does: a step's metrics are not worth the trainer's life."""
        writer = self.clients.writer
        while True:
            try:
                writer.begin()
                self.clients.metrics.emit(self.step, values)
                writer.commit()
                return
            except FencedError as exc:
                if not self.recovered_from_fence(exc):
                    raise
            except TransportError as exc:
                self.abort_transaction(exc, "the step's metrics")
                if writer.window is None:
                    raise
                writer.window.failed(f"step {self.step}'s metrics: {exc}")
                log.warning("step %d's metrics failed (%s): written again", self.step, exc)

    def settle(self) -> None:
        """Tell the ledger what the sampler let go."""
        for item in self.sampler.release():
            self.ledger.settled(item.tp, item.offset)
            self.consumed.pop((item.tp, item.offset), None)
            self.settled_since_publish.setdefault(item.tp, []).append(item.offset)

    def publish(self, *, final: bool) -> None:
        """Begin version `self.step` (the one before it landed first: versions commit in order).
        Its files go up in the background while the loop goes on; `land` commits and announces
        it, at the next tick that finds the upload done or has nothing to train, and a final
        version at once."""
        self.land(wait=True)
        self.begin_version(final)
        if final:
            self.land(wait=True)

    def begin_version(self, final: bool) -> None:
        """What version `self.step` holds, taken now: the engine's weights (copies of their
        own), the offsets it consumed and the sampler's state; its upload starts."""
        step, parent_version = self.step, self.last_published
        steps, self.unpublished_steps = self.unpublished_steps, []
        # the version is part of the newest step's trace, and linked to every step it holds
        parent = trace.set_span_in_context(NonRecordingSpan(steps[-1])) if steps else new_trace()
        span = tracer.start_span(PUBLISH_VERSION, context=parent, links=[Link(s) for s in steps])
        span.set_attributes(
            {"rft.run": self.run_id, "rft.version": step, "rft.parent_version": parent_version}
        )
        offsets = [(t, p, o) for (t, p), o in sorted(self.ledger.safe_offsets().items())]
        state = {
            **self.extra_state,
            "sampler": self.sampler.state(),
            "settled_ahead": [
                [t, p, to_ranges(offs)]
                for (t, p), offs in sorted(self.ledger.settled_ahead().items())
            ],
            "trained_log": self.trained_log(),
        }
        context = trace.set_span_in_context(span)
        try:
            self.checkpoints.begin(
                self.step_trainer.engine,
                step,
                parent_version,
                offsets,
                final=final,
                sampler_state=state,
                trace_context=context,
            )
        except BaseException as exc:
            span.record_exception(exc)
            span.end()
            raise
        self.trained_since_publish, self.settled_since_publish = {}, {}
        self.publishing = _Publishing(
            step,
            span,
            context,
            [TopicPartitionOffset(t, p, o) for t, p, o in offsets],
            trained_log_of(state),
            time.monotonic(),
        )

    def land(self, *, wait: bool) -> None:
        """Commit and announce the version whose files are going up (nothing when none is, or
        when its upload is not done and not `wait`).

        A fence the broker made on its own (rft.events.claims) is not the end, nor is Kafka
        failing the announcement in an outage (a record expired, a transaction the broker
        aborted): the producer is replaced or the transaction aborted, and the version announced
        (its manifest was written) or committed again from the same files, for as long as the
        outage window allows."""
        publishing = self.publishing
        if publishing is None or (not wait and not self.checkpoints.uploaded()):
            return
        step = publishing.step
        again = False
        try:
            while True:
                try:
                    if again and self.checkpoints.store.has_manifest(step):
                        # committed before a failed announcement: the version's own steps, as
                        # its saved state holds them
                        self.checkpoints.forget_pending()
                        saved = self.checkpoints.read_sampler_state(step)
                        self.announce_written(step, trained_log_of(saved or {}))
                    else:
                        self.commit_and_announce(publishing)
                    break
                except FencedError as exc:
                    if not self.recovered_from_fence(exc):
                        raise
                    again = True
                except TransportError as exc:
                    again = True
                    self.abort_transaction(exc, "the announcement")
                    window = self.clients.writer.window
                    if window is None:
                        raise
                    window.failed(f"announcing v{step}: {exc}")  # OutageError past the window
                    log.warning("announcing v%d failed (%s): done again", step, exc)
        except BaseException as exc:
            publishing.span.record_exception(exc)
            raise
        finally:
            publishing.span.end()
            self.publishing = None
        if self.keep_checkpoints:
            self.checkpoints.prune_behind(self.keep_checkpoints, self.versions_in_use)
        self.last_published, self.sync_requested = step, False
        self.summary.published_versions.append(step)
        log.info(
            "published weight version %d in %.1fs (trained to step %d meanwhile)",
            step,
            time.monotonic() - publishing.started,
            self.step,
        )

    def commit_and_announce(self, publishing: _Publishing) -> None:
        """The version's manifest and its announcement, in one transaction."""

        def stage(manifest: CheckpointManifest) -> None:
            # a sibling of the upload under the version's span; the WeightVersion's headers
            # carry it, and each explorer's load links to it
            with tracer.start_as_current_span(
                ANNOUNCE, context=publishing.context, kind=SpanKind.PRODUCER
            ) as announce:
                announce.set_attributes(
                    {
                        "rft.version": publishing.step,
                        "messaging.destination.name": self.clients.weights_topic,
                    }
                )
                self.stage_announcement(manifest, publishing.positions, publishing.trained)

        try:
            self.checkpoints.land(before_commit=stage)
            fault_point("trainer.before_announce")  # the manifest exists, not yet announced
        except BaseException as exc:
            self.abort_transaction(exc, "the announcement")
            raise
        self.clients.writer.commit()  # the WeightVersion becomes visible to explorers

    def trained_log(self) -> dict[str, list[list[Any]]]:
        """What the steps since the last publish trained and settled, as JSON: `trained` holds
        [topic, partition, [[first, last], ...]] per partition (each offset trained once) and
        `retrained` [topic, partition, offset, times] for an offset trained more than once;
        `settled` holds the ranges the sampler let go (trained, dropped stale, filtered...)."""
        trained, retrained = [], []
        for (t, p), counts in sorted(self.trained_since_publish.items()):
            trained.append([t, p, to_ranges(sorted(counts))])
            retrained += [[t, p, o, n] for o, n in sorted(counts.items()) if n > 1]
        settled = [
            [t, p, to_ranges(sorted(set(offs)))]
            for (t, p), offs in sorted(self.settled_since_publish.items())
        ]
        return {"trained": trained, "retrained": retrained, "settled": settled}

    def weight_version(
        self, manifest: CheckpointManifest, trained: TrainedLog | None
    ) -> WeightVersion:
        """The announcement of a written version, with what its steps trained."""
        return WeightVersion(
            version=manifest.version,
            train_step=manifest.train_step,
            uri=self.checkpoints.store.uri(manifest.version),
            manifest=tuple(ManifestEntry(f.name, f.size, f.sha256) for f in manifest.files),
            consumed_offsets=tuple(
                TopicOffset(o.topic, o.partition, o.offset) for o in manifest.consumed_offsets
            ),
            parent_version=manifest.parent_version,
            trained_log=trained,
        )

    def stage_announcement(
        self,
        manifest: CheckpointManifest,
        positions: list[TopicPartitionOffset],
        trained: TrainedLog | None,
    ) -> None:
        """Open the version's transaction: its WeightVersion and the group's offsets, flushed,
        so a fenced producer fails here, before the manifest exists."""
        writer = self.clients.writer
        event = self.weight_version(manifest, trained)
        writer.begin()
        writer.send(self.clients.weights_topic, event, key=b"weights")
        if not isinstance(self.clients.experiences, EventReader):
            # an offline range has no consumer group to commit for: the manifest holds its offsets
            writer.flush()
            return
        try:
            writer.send_offset_positions(self.clients.experiences, positions)
        except FencedError:
            raise
        except TransactionError as exc:
            # The group dropped this consumer (a rebalance, a long step), or the broker went
            # away mid-call (an outage). The group's committed offsets only inform lag monitors
            # (resumes read the manifest's), so the version is announced without them.
            log.warning("v%d announced without group offsets: %s", manifest.version, exc)
            writer.abort()
            writer.begin()
            writer.send(self.clients.weights_topic, event, key=b"weights")
        writer.flush()

    def abort_transaction(self, cause: BaseException, what: str) -> None:
        """Abort the writer's open transaction after `cause`; a fenced producer cannot (and need
        not: its transaction is void)."""
        if not self.clients.writer.in_transaction or isinstance(cause, FencedError):
            return
        try:
            self.clients.writer.abort()
        except TransportError as exc:
            log.warning("could not abort the transaction of %s: %s", what, exc)

    def announce_resumed(self, announced: Collection[int]) -> None:
        """Announce the version a restart resumed from if it is not among `announced` (the
        versions on the weights topic), in a transaction of its own. A trainer killed between a
        version's manifest (the commit point) and its transaction's commit left it unannounced,
        and explorers that wait for it would wait forever."""
        if not self.step or self.step in announced:
            return
        self.announce_written(self.step, self.resumed_log)
        log.info("announced the resumed version %d, which its writer had not", self.step)

    def announce_written(self, version: int, trained: TrainedLog | None) -> None:
        """Announce `version`, whose manifest exists, in a transaction of its own."""
        writer = self.clients.writer
        manifest = self.checkpoints.store.read_manifest(version)
        writer.begin()
        event = self.weight_version(manifest, trained)
        writer.send(self.clients.weights_topic, event, key=b"weights")
        writer.commit()

    def idle_too_long(self) -> bool:
        idle = time.monotonic() - self.idle_since
        if idle <= self.idle_timeout_s:
            return False
        log.warning(
            "no experiences and no batch for %.0fs at step %d/%d: stopping",
            self.idle_timeout_s,
            self.step,
            self.total_steps,
        )
        return True
