"""TrainerLoop: one trainer run in motion, and the owner of its moving state.

It holds the Kafka clients, the offset ledger, the sampler, the step trainer, the checkpointer
and the counters. `tick()` is one pass of the loop and reads top to bottom:

    answer sync requests -> ingest experiences -> train a ready batch -> publish if due

A weight version is written to the checkpoint store (files, then the manifest carrying the
consumed offsets, with the sampler's state under `trainer_state/`) and then announced on the
`weights` topic. `resume` puts a restarted trainer back where its newest version left off.

Each version's saved state also holds its `trained_log`: the experience offsets its own steps
(those after its parent version) trained, with how many times, and the offsets they settled. A
chain of versions from the newest back through its parents is then the durable record of what the
run trained: steps lost with a killed trainer are not in it, and their redo is (the run checker,
`consumers.run_check`, reads it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace

from consumers.experience_mirror import ExperienceMirror
from consumers.train_step import StepTrainer
from consumers.trainer_checkpoint import TrainerCheckpointer
from producers.metric_emitter import MetricEmitter
from rft.buffer.batch_metrics import batch_metrics
from rft.buffer.offset_ledger import OffsetLedger, from_ranges, to_ranges
from rft.buffer.sampler import Admitted, SampledBatch, Sampler
from rft.errors import TransportError
from rft.events.models import Experience, ManifestEntry, SyncRequest, TopicOffset, WeightVersion
from rft.events.reader import EventReader
from rft.events.writer import EventWriter
from rft.fault_points import fault_point
from rft.storage.checkpoint_manifest import CheckpointManifest
from rft.synchronizer import SyncStyle

log = logging.getLogger(__name__)
tracer = trace.get_tracer("rft.trainer")


@dataclass
class TrainerSummary:
    steps: int = 0
    experiences: int = 0
    dropped_stale: int = 0
    published_versions: list[int] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)


@dataclass
class LoopClients:
    """The loop's connections: experiences in, sync requests in, events out."""

    experiences: EventReader
    control: EventReader
    writer: EventWriter
    metrics: MetricEmitter
    weights_topic: str
    mirror: ExperienceMirror | None = None


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
        stop: threading.Event | None = None,
    ) -> None:
        self.clients = clients
        self.sampler = sampler
        self.step_trainer = step_trainer
        self.checkpoints = checkpoints
        self.style = style
        self.total_steps = total_steps
        self.idle_timeout_s = idle_timeout_s
        self.keep_checkpoints = keep_checkpoints
        self.stop = stop or threading.Event()
        self.ledger = OffsetLedger()
        self.summary = TrainerSummary()
        self.step = 0
        self.last_published = 0
        self.sync_requested = False
        self.trained_last_tick = False
        self.previous_counters = sampler.counters.copy()
        self.idle_since = self.wait_started = time.monotonic()
        # since the last publish: (topic, partition) -> offset -> times trained; offsets settled
        self.trained_since_publish: dict[tuple[str, int], dict[int, int]] = {}
        self.settled_since_publish: dict[tuple[str, int], list[int]] = {}

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
        self.previous_counters = self.sampler.counters.copy()

    def tick(self) -> bool:
        """One pass; False once the run is over (total steps, stop, or idle too long)."""
        if self.step >= self.total_steps or self.stop.is_set():
            return False
        self.answer_sync_requests()
        # right after a step another batch may be ready (replay, a backlog): do not wait on Kafka
        read = self.ingest(wait_s=0.0 if self.trained_last_tick else 1.0)
        batch = self.sampler.take_batch(self.step)
        if batch is not None:
            self.train(batch)
        self.settle()
        if batch is not None and (self.style.should_publish(self.step) or self.finished):
            self.publish(final=self.finished)
        self.trained_last_tick = batch is not None
        if read or batch is not None:
            self.idle_since = time.monotonic()
        return not self.idle_too_long()

    def finish(self) -> TrainerSummary:
        """Publish what is unpublished (its version carries the training state) and report."""
        if self.step > self.last_published:
            self.publish(final=True)
        incomplete, untrained = self.sampler.waiting()
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

    # -- the steps of a tick --------------------------------------------------------------------

    def answer_sync_requests(self) -> None:
        """Explorers that sync on request (dynamic_by_explorer) get the newest step published."""
        if not self.style.publishes_on_request:
            return
        for env in self.clients.control.poll(100, timeout_s=0.0):
            req = env.event
            # older requests find their answer on the weights topic already
            if isinstance(req, SyncRequest) and req.current_version >= self.last_published:
                log.info(
                    "sync requested by %s at its step %d (it holds v%d)",
                    req.explorer_id,
                    req.step,
                    req.current_version,
                )
                self.sync_requested = True
        if self.sync_requested and self.step > self.last_published:
            self.publish(final=False)

    def ingest(self, wait_s: float = 1.0) -> int:
        """Poll experiences into the ledger and the sampler; how many were read."""
        got = self.clients.experiences.poll(500, timeout_s=wait_s)
        if self.clients.mirror is not None:
            self.clients.mirror.write(e.event for e in got if isinstance(e.event, Experience))
        for env in got:
            tp = (env.topic, env.partition)
            if not self.ledger.polled(tp, env.offset):
                continue  # settled before a restart: trained, dropped or filtered already
            if isinstance(env.event, Experience):
                self.sampler.add(Admitted(env.event, tp, env.offset))
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

    def commit_for_monitoring(self) -> None:
        """Commit the group's offsets, which only tools like lag monitors read: resumes use the
        manifest's offsets, so a failed commit (e.g. after a rebalance) costs nothing to say."""
        try:
            self.clients.experiences.commit()
        except TransportError as exc:
            log.warning("group offset commit failed (resumes use the manifest's offsets): %s", exc)

    def train(self, batch: SampledBatch) -> None:
        """One optimizer step on `batch`, and its metrics."""
        wait_s = time.monotonic() - self.wait_started
        self.step += 1
        values = self.step_trainer.train(batch, self.step)
        fault_point("trainer.after_step")
        values |= batch_metrics(batch, self.previous_counters)
        values["wait_time_s"] = wait_s
        self.clients.metrics.emit(self.step, values)
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

    def settle(self) -> None:
        """Tell the ledger what the sampler let go."""
        for item in self.sampler.release():
            self.ledger.settled(item.tp, item.offset)
            self.settled_since_publish.setdefault(item.tp, []).append(item.offset)

    def publish(self, *, final: bool) -> None:
        """Checkpoint first (manifest last), then announce: readers trust only what is verified."""
        started = time.monotonic()
        step, parent = self.step, self.last_published
        with tracer.start_as_current_span("trainer.publish") as span:
            span.set_attribute("rft.version", step)
            offsets = [(t, p, o) for (t, p), o in sorted(self.ledger.safe_offsets().items())]
            state = {
                "sampler": self.sampler.state(),
                "settled_ahead": [
                    [t, p, to_ranges(offs)]
                    for (t, p), offs in sorted(self.ledger.settled_ahead().items())
                ],
                "trained_log": self.trained_log(),
            }
            manifest = self.checkpoints.write(
                self.step_trainer.engine, step, parent, offsets, final=final, sampler_state=state
            )
            fault_point("trainer.before_announce")
            self.announce(manifest)
        if self.keep_checkpoints:
            self.checkpoints.store.prune(keep_last=self.keep_checkpoints)
        self.last_published, self.sync_requested = step, False
        self.trained_since_publish, self.settled_since_publish = {}, {}
        self.summary.published_versions.append(step)
        log.info("published weight version %d in %.1fs", step, time.monotonic() - started)

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

    def announce(self, manifest: CheckpointManifest) -> None:
        """Send the WeightVersion of a written version and wait until the broker has it."""
        event = WeightVersion(
            version=manifest.version,
            train_step=manifest.train_step,
            uri=self.checkpoints.store.uri(manifest.version),
            manifest=tuple(ManifestEntry(f.name, f.size, f.sha256) for f in manifest.files),
            consumed_offsets=tuple(
                TopicOffset(o.topic, o.partition, o.offset) for o in manifest.consumed_offsets
            ),
            parent_version=manifest.parent_version,
        )
        self.clients.writer.send(self.clients.weights_topic, event, key=b"weights")
        self.clients.writer.flush()

    def announce_resumed(self) -> None:
        """Announce the version a restart resumed from again. A trainer killed between a
        version's manifest and its announcement left it unannounced, and explorers that wait for
        it would wait forever; announcing a version twice changes nothing for them (a follower
        keeps the newest it has seen)."""
        if self.step:
            self.announce(self.checkpoints.store.read_manifest(self.step))
            log.info("announced the resumed version %d again", self.step)

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
