"""Explorer: a consumer-group member that turns Task events into Experience events.

Each step polls `buffer.batch_size` tasks, rolls every one out `repeat_times` times on the rollout
engine in one batched call, scores the replies, and writes one Experience per rollout tagged with
the weight version that produced it. The experiences and the task offsets commit in one Kafka
transaction: a task is explored again only if its explorer died before that commit. Between steps
the explorer follows the synchronizer's sync style to load new weight versions.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field

import numpy as np
from opentelemetry import trace

from consumers.evaluation import correctness, evaluate_tasksets, read_eval_tasks
from consumers.explorer_progress import progress_metadata, resumed_step
from consumers.run_plan import RunPlan
from consumers.weight_follower import WeightFollower
from producers.metric_emitter import MetricEmitter
from rft.config import RftConfig
from rft.engines.rollout import (
    RolloutEngine,
    RolloutEngineConfig,
    SamplingParams,
    create_rollout_engine,
)
from rft.errors import TasksetError
from rft.events.codec import EventCodec
from rft.events.models import DeadLetter, Experience, SyncRequest, Task
from rft.events.reader import Envelope, EventReader
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.synchronizer import build_sync_style
from rft.workflows.runner import WorkflowResult, run_workflows, split_runnable

log = logging.getLogger(__name__)
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
        self.style = build_sync_style(
            cfg.synchronizer.sync_style,
            cfg.synchronizer.sync_interval,
            cfg.synchronizer.sync_offset,
        )
        self._engine = engine
        self.summary = ExplorerSummary()
        self._eval_tasks: dict[str, list[Task]] | None = None

    # -- set-up -------------------------------------------------------------------------------

    def _build_engine(self) -> RolloutEngine:
        rm = self.cfg.explorer.rollout_model
        spec = self.plan.model_spec(dtype=self.plan.rollout_dtype, device=self.plan.explorer_device)
        threads = int(os.environ.get("RFT_NUM_THREADS", "0")) or None
        return create_rollout_engine(
            rm.engine_type, RolloutEngineConfig(model=spec, num_threads=threads)
        )

    def _base_params(self, step: int) -> SamplingParams:
        rm = self.cfg.explorer.rollout_model
        return SamplingParams(
            max_tokens=self.cfg.model.max_response_tokens,
            seed=rm.seed * 1_000_003 + step,
        )

    # -- the loop -----------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> ExplorerSummary:
        stop = stop or threading.Event()
        kafka = self.cfg.stack.kafka
        topics = self.plan.topics
        ensure_topics(kafka, topics)
        engine = self._engine or self._build_engine()
        total_steps = self.plan.total_steps
        weights_group = f"{self.plan.run_id}.weights.{self.explorer_id}"
        with (
            EventReader.open(
                kafka,
                self.plan.explorer_group,
                [topics.tasks],
                from_beginning=True,
                dead_letter_topic=topics.dead_letter,
            ) as tasks,
            EventWriter.open(
                kafka, transactional_id=f"{self.plan.explorer_group}.{self.explorer_id}"
            ) as tx,
            EventWriter.open(kafka) as plain,
            WeightFollower(
                kafka, topics.weights, weights_group, self.plan.checkpoint_store()
            ) as follower,
        ):
            metrics = MetricEmitter(plain, topics.metrics, "explorer", self.plan.run_id)
            follower.poll(timeout_s=1.0)
            if self.cfg.continue_from_checkpoint:
                follower.load_newest(engine)
            step = resumed_step(tasks.committed()) if self.cfg.continue_from_checkpoint else 0
            if step:
                log.info(
                    "resuming at step %d of %d (from the group's committed task offsets)",
                    step,
                    total_steps,
                )
            self.summary.resumed_from = step
            if self.cfg.explorer.eval_on_startup:
                self._evaluate(engine, metrics, step=step)
            idle_since = time.monotonic()
            while step < total_steps and not stop.is_set():
                self._sync_before(step + 1, engine, follower, plain)
                batch = self._poll_batch(tasks, stop)
                if not batch:
                    if time.monotonic() - idle_since > self.idle_timeout_s:
                        log.info(
                            "no tasks for %.0fs: the taskset is exhausted", self.idle_timeout_s
                        )
                        break
                    continue
                idle_since = time.monotonic()
                step += 1
                self._explore_step(step, batch, engine, tasks, tx, metrics)
                if step % self.cfg.explorer.eval_interval == 0 or step == total_steps:
                    self._evaluate(engine, metrics, step)
            self.summary.steps = step
            plain.flush()
        return self.summary

    def _sync_before(
        self, step: int, engine: RolloutEngine, follower: WeightFollower, plain: EventWriter
    ) -> None:
        timeout = self.cfg.synchronizer.sync_timeout
        need = self.style.required_version(step)
        if self.style.should_request(step):
            plain.send(
                self.plan.topics.control,
                SyncRequest(self.explorer_id, engine.model_version, step),
                key=self.explorer_id,
            )
            plain.flush()
            need = engine.model_version + 1
        if need > engine.model_version:
            started = time.monotonic()
            latest = follower.wait_for(need, timeout)
            if latest is None or latest.version < need:
                if self.style.should_request(step):
                    log.info("step %d: no newer weights within %.0fs, going on", step, timeout)
                else:
                    log.warning(
                        "step %d needs weight version %d, still at %s after %.0fs; going on",
                        step,
                        need,
                        None if latest is None else latest.version,
                        time.monotonic() - started,
                    )
        else:
            follower.poll()
        follower.load_newest(engine)

    def _poll_batch(self, tasks: EventReader, stop: threading.Event) -> list[Envelope]:
        """Up to batch_size tasks; waits a little for a full batch, returns what it has."""
        want = self.plan.batch_size
        batch: list[Envelope] = []
        deadline = time.monotonic() + 5.0
        while len(batch) < want and not stop.is_set():
            batch.extend(tasks.poll(want - len(batch), timeout_s=1.0))
            if time.monotonic() > deadline:
                break
        return batch

    def _explore_step(
        self,
        step: int,
        batch: list[Envelope],
        engine: RolloutEngine,
        tasks: EventReader,
        tx: EventWriter,
        metrics: MetricEmitter,
    ) -> None:
        with tracer.start_as_current_span("explorer.step", context=batch[0].trace_context) as span:
            span.set_attribute("rft.step", step)
            span.set_attribute("rft.model_version", engine.model_version)
            by_id = {}
            for env in batch:
                if isinstance(env.event, Task):
                    by_id[env.event.task_id] = env
            runnable, rejected = split_runnable([by_id[k].event for k in by_id])  # type: ignore[misc]
            started = time.monotonic()
            results = run_workflows(runnable, engine, self._base_params(step)) if runnable else []
            rollout_s = time.monotonic() - started
            version = engine.model_version
            tx.begin()
            sent = 0
            for result in results:
                for exp in self._experiences(result, version):
                    tx.send(self.plan.experience_topic, exp, key=exp.task_id)
                    sent += 1
            for task_id, why in rejected.items():
                env = by_id[task_id]
                tx.send(
                    self.plan.topics.dead_letter,
                    DeadLetter.for_error(
                        TasksetError(f"task {task_id} rejected by its workflow: {why}"),
                        topic=env.topic,
                        partition=env.partition,
                        offset=env.offset,
                        payload=EventCodec.default().encode(env.event),
                        consumer=self.plan.explorer_group,
                        key=env.key,
                        headers=env.headers,
                    ),
                    key=env.key,
                )
                log.warning(
                    "%s[%d]@%d: task %s rejected by its workflow (%s); parked in dead-letter",
                    env.topic,
                    env.partition,
                    env.offset,
                    task_id,
                    why,
                )
            tx.send_offsets(tasks, batch, progress_metadata(step, self.explorer_id))
            tx.commit()
            span.set_attribute("rft.experiences", sent)
        self._record_step(step, results, rollout_s, version, len(rejected), metrics)

    def _experiences(self, result: WorkflowResult, version: int) -> list[Experience]:
        task = result.task
        group_id = f"{task.task_id}:{self.explorer_id}:{uuid.uuid4().hex[:8]}"
        out = []
        for i, (rollout, reward, info) in enumerate(
            zip(result.rollouts, result.rewards, result.infos, strict=True)
        ):
            out.append(
                Experience(
                    experience_id=f"{group_id}:{i}",
                    task_id=task.task_id,
                    group_id=group_id,
                    group_size=len(result.rollouts),
                    explorer_id=self.explorer_id,
                    model_version=version,
                    prompt_ids=rollout.prompt_ids,
                    response_ids=rollout.response_ids,
                    logprobs=rollout.logprobs,
                    reward=float(reward),
                    response_text=rollout.text,
                    info={k: str(v) for k, v in info.items()},
                    truncated=rollout.finish_reason == "length",
                    logprob_temperature=rollout.logprob_temperature,
                    explorer_group=self.plan.explorer_group,
                )
            )
        return out

    def _record_step(
        self,
        step: int,
        results: list[WorkflowResult],
        rollout_s: float,
        version: int,
        rejected: int,
        metrics: MetricEmitter,
    ) -> None:
        rewards = np.array([r for res in results for r in res.rewards], dtype=np.float64)
        correct = correctness(results)
        lengths = np.array([len(ro.response_ids) for res in results for ro in res.rollouts])
        tokens = int(lengths.sum()) if lengths.size else 0
        s = self.summary
        s.tasks += len(results) + rejected
        s.experiences += int(rewards.size)
        s.rejected_tasks += rejected
        s.generated_tokens += tokens
        s.rollout_seconds += rollout_s
        values = {
            "model_version": float(version),
            "tasks": float(len(results)),
            "rejected_tasks": float(rejected),
            "rollout_time_s": rollout_s,
            "rollout_tokens_per_s": tokens / rollout_s if rollout_s > 0 else 0.0,
        }
        if rewards.size:
            values |= {
                "reward_mean": float(rewards.mean()),
                "reward_std": float(rewards.std()),
                "accuracy": float(correct.mean()),
                "response_length_mean": float(lengths.mean()),
                "response_length_max": float(lengths.max()),
            }
        metrics.emit(step, values)

    # -- evaluation ---------------------------------------------------------------------------

    def _load_eval_tasks(self) -> dict[str, list[Task]]:
        """Read the eval-tasks topic to its end once (it is published before explorers start)."""
        if self._eval_tasks is None:
            self._eval_tasks = read_eval_tasks(
                self.cfg.stack.kafka,
                self.plan.topics.eval_tasks,
                f"{self.plan.run_id}.eval-reader.{self.explorer_id}",
                expect_tasks=bool(self.cfg.buffer.explorer_input.eval_tasksets),
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
                self.cfg.model.max_response_tokens,
                at=f"step {step}",
            )
        self.summary.eval_accuracy[step] = result.accuracy
        metrics.emit(step, result.metric_values())
