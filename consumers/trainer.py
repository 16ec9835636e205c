"""Trainer: a consumer of Experience events that batches, trains and publishes weight versions.

Experiences stream in from the experience topic; the staleness policy drops (and counts) those
too old to train on, the group batcher keeps every rollout group whole, and each batch of
`train_batch_size` becomes one optimizer step of the configured algorithm. Weight versions are
written to the checkpoint store (manifest last, carrying the consumed offsets) and then announced
on the `weights` topic. A restarted trainer resumes from its newest checkpoint's offsets.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch
from opentelemetry import trace

from consumers.experience_mirror import experience_mirror
from consumers.run_plan import RunPlan
from consumers.trainer_checkpoint import TrainerCheckpointer
from producers.metric_emitter import MetricEmitter
from rft.algorithms.objective import AlgorithmLoss, LossBatch, build_loss, compute_advantages
from rft.algorithms.presets import resolve_algorithm
from rft.buffer.group_batcher import GroupBatcher
from rft.buffer.offset_ledger import OffsetLedger
from rft.buffer.sample_strategy import SAMPLE_STRATEGIES
from rft.buffer.staleness import StalenessPolicy
from rft.config import RftConfig
from rft.engines.models import load_model, torch_dtype
from rft.engines.trainer import (
    TRAINER_ENGINES,
    TorchTrainerConfig,
    TrainBatch,
    TrainerEngine,
    TrainerPlacement,
)
from rft.errors import ConfigError
from rft.events.models import Experience, ManifestEntry, SyncRequest, TopicOffset, WeightVersion
from rft.events.reader import Envelope, EventReader
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.synchronizer import build_sync_style

log = logging.getLogger(__name__)
tracer = trace.get_tracer("rft.trainer")


@dataclass(frozen=True)
class Admitted:
    """An experience waiting for its batch, with where it came from (for the offset ledger)."""

    exp: Experience
    tp: tuple[str, int]
    offset: int

    @property
    def group_id(self) -> str:
        return self.exp.group_id

    @property
    def group_size(self) -> int:
        return self.exp.group_size


@dataclass
class TrainerSummary:
    steps: int = 0
    experiences: int = 0
    dropped_stale: int = 0
    published_versions: list[int] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)


def master_dtype(model_dtype: str) -> str:
    """The dtype the trainer keeps its weights and AdamW state in: float32 unless float64."""
    if model_dtype == "float16":
        raise ConfigError(
            "model.dtype: float16 is not trainable here (it would need loss scaling); use "
            "bfloat16 (bf16 forward, float32 master weights) or float32, and set "
            "explorer.rollout_model.dtype: float16 for a float16 rollout"
        )
    return "float64" if model_dtype == "float64" else "float32"


def trainer_engine_config(cfg: RftConfig, total_steps: int, use_ref: bool) -> TorchTrainerConfig:
    optim = cfg.trainer.optim
    warmup = optim.lr_warmup_steps or int(optim.lr_warmup_steps_ratio * total_steps)
    return TorchTrainerConfig(
        lr=optim.lr,
        betas=(float(optim.betas[0]), float(optim.betas[1])),
        weight_decay=optim.weight_decay,
        warmup_steps=warmup,
        total_steps=total_steps,
        lr_schedule=optim.warmup_style,
        min_lr_ratio=optim.min_lr_ratio,
        grad_clip=cfg.trainer.grad_clip,
        micro_batch_size=cfg.trainer.micro_batch_size,
        use_ref_model=use_ref,
    )


class EngineLoss:
    """Adapts the algorithm's objective to the trainer engine's loss_fn signature."""

    def __init__(self, loss: AlgorithmLoss) -> None:
        self.loss = loss

    def __call__(
        self, logprob: torch.Tensor, entropy: torch.Tensor, t: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        batch = LossBatch(
            action_mask=t["action_mask"],
            old_logprob=t["old_logprobs"],
            advantages=t["advantages"],
            ref_logprob=t.get("ref_logprobs"),
        )
        loss, metrics = self.loss(logprob, entropy, batch)
        if "entropy" not in metrics and entropy is not None:
            # reported even when no entropy term is trained on: collapse shows here first
            mask = t["action_mask"]
            metrics["entropy"] = float((entropy.detach() * mask).sum() / mask.sum().clamp(min=1))
        return loss, metrics


class Trainer:
    def __init__(self, cfg: RftConfig, *, idle_timeout_s: float | None = None) -> None:
        self.cfg = cfg
        self.plan = RunPlan(cfg)
        self.spec = resolve_algorithm(cfg.algorithm)
        self.loss = build_loss(self.spec)
        self.style = build_sync_style(
            cfg.synchronizer.sync_style,
            cfg.synchronizer.sync_interval,
            cfg.synchronizer.sync_offset,
        )
        self.staleness = StalenessPolicy(cfg.buffer.trainer_input.max_staleness)
        self.idle_timeout_s = (
            idle_timeout_s
            if idle_timeout_s is not None
            else cfg.buffer.trainer_input.experience_buffer.max_read_timeout
        )
        self.summary = TrainerSummary()

    def run(self, stop: threading.Event | None = None) -> TrainerSummary:
        stop = stop or threading.Event()
        kafka = self.cfg.stack.kafka
        topics = self.plan.topics
        ensure_topics(kafka, topics)
        total_steps = self.plan.total_steps
        device = self.plan.trainer_device
        compute_dtype = self.plan.resolve_dtype(self.cfg.model.dtype, device)
        model, tokenizer = load_model(
            self.plan.model_spec(dtype=master_dtype(compute_dtype), device=device)
        )
        engine_config = dataclasses.replace(
            trainer_engine_config(self.cfg, total_steps, self.spec.use_reference),
            ref_in_loss=self.loss.needs_reference,
        )
        if compute_dtype == "bfloat16":
            engine_config = dataclasses.replace(engine_config, autocast_dtype="bfloat16")
        # the engine copies its KL reference from the base model before any checkpoint loads;
        # trainer_type / trainer_strategy pick it, world_size sets its ranks
        engine = TRAINER_ENGINES.get(self.cfg.trainer.engine_name)(
            model, tokenizer, engine_config, TrainerPlacement(self.plan.trainer_devices)
        )
        checkpoints = TrainerCheckpointer(
            self.plan.checkpoint_store(),
            self.cfg.trainer.save_interval,
            weights_dtype=torch_dtype(self.plan.rollout_dtype),
        )
        step, resume_offsets = (
            checkpoints.restore(engine) if self.cfg.continue_from_checkpoint else (0, {})
        )
        ledger = OffsetLedger()
        batcher: GroupBatcher[Admitted] = SAMPLE_STRATEGIES.get(self.spec.sample_strategy)(
            self.plan.train_batch_size, **self.cfg.algorithm.sample_strategy_args
        )
        last_published = step
        pending_request = False
        control_group = f"{self.plan.run_id}.trainer-control.{self.cfg.trainer.name}"
        with (
            contextlib.closing(engine),  # stops the engine's other ranks
            EventReader.open(
                kafka,
                self.plan.trainer_group,
                [self.plan.experience_topic],
                from_beginning=True,
                dead_letter_topic=topics.dead_letter,
            ) as reader,
            # From the beginning: a request sent before this group's first assignment must not be
            # lost; requests that a published version already answers are ignored below.
            EventReader.open(
                kafka, control_group, [topics.control], from_beginning=True
            ) as control,
            EventWriter.open(kafka) as writer,
            experience_mirror(self.cfg, tokenizer.decode) as mirror,
        ):
            for tp, offset in resume_offsets.items():
                reader.seek(tp[0], tp[1], offset)
                ledger.start(tp, offset)
            metrics = MetricEmitter(writer, topics.metrics, "trainer", self.plan.run_id)
            idle_since = time.monotonic()
            wait_started = time.monotonic()
            while step < total_steps and not stop.is_set():
                if self.style.publishes_on_request:
                    pending_request |= self._sync_requested(control, last_published)
                    if pending_request and step > last_published:
                        self._publish(
                            step, last_published, engine, checkpoints, ledger, writer, final=False
                        )
                        last_published, pending_request = step, False
                got = reader.poll(500, timeout_s=1.0)
                if mirror is not None:
                    mirror.write(e.event for e in got if isinstance(e.event, Experience))
                for env in got:
                    self._admit(env, step, ledger, batcher)
                if got:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > self.idle_timeout_s:
                    log.warning(
                        "no experiences for %.0fs at step %d/%d: stopping",
                        self.idle_timeout_s,
                        step,
                        total_steps,
                    )
                    break
                batch = batcher.take_batch()
                if batch is None:
                    continue
                wait_s = time.monotonic() - wait_started
                step += 1
                self._train_step(step, [a.exp for a in batch], engine, metrics, wait_s)
                for item in batch:
                    ledger.settled(item.tp, item.offset)
                reader.commit()  # group offsets for monitoring only; resumes use manifests
                if self.style.should_publish(step) or step == total_steps:
                    final = step == total_steps
                    self._publish(
                        step, last_published, engine, checkpoints, ledger, writer, final=final
                    )
                    last_published = step
                wait_started = time.monotonic()
            if step > last_published:  # stopped early: the last version carries training state
                self._publish(step, last_published, engine, checkpoints, ledger, writer, final=True)
            incomplete = batcher.flush_incomplete()
            if incomplete or batcher.ready_count:
                log.info(
                    "stopping with %d experiences in incomplete groups and %d ready but "
                    "untrained; they stay in the topic after the recorded offsets",
                    sum(len(g) for g in incomplete),
                    batcher.ready_count,
                )
            writer.flush()
        self.summary.steps = step
        return self.summary

    # -- pieces -------------------------------------------------------------------------------

    def _sync_requested(self, control: EventReader, last_published: int) -> bool:
        """Whether an unanswered SyncRequest arrived: one from an explorer still on a version at
        least as new as the last one published (older ones find their answer on the weights
        topic)."""
        requested = False
        for env in control.poll(100, timeout_s=0.0):
            req = env.event
            if isinstance(req, SyncRequest) and req.current_version >= last_published:
                log.info(
                    "sync requested by %s at its step %d (it holds v%d)",
                    req.explorer_id,
                    req.step,
                    req.current_version,
                )
                requested = True
        return requested

    def _admit(
        self,
        env: Envelope,
        step: int,
        ledger: OffsetLedger,
        batcher: GroupBatcher[Admitted],
    ) -> None:
        tp = (env.topic, env.partition)
        ledger.polled(tp, env.offset)
        exp = env.event
        if not isinstance(exp, Experience):
            log.warning(
                "%s[%d]@%d: %s on the experience topic, skipped",
                env.topic,
                env.partition,
                env.offset,
                type(exp).__name__,
            )
            ledger.settled(tp, env.offset)
            return
        if not self.staleness.accepts(step, exp.model_version):
            self.summary.dropped_stale += 1
            log.info(
                "%s[%d]@%d: experience of version %d is %d versions stale (max %s): dropped",
                env.topic,
                env.partition,
                env.offset,
                exp.model_version,
                self.staleness.staleness(step, exp.model_version),
                self.staleness.max_staleness,
            )
            ledger.settled(tp, env.offset)
            return
        batcher.add(Admitted(exp, tp, env.offset))

    def _train_step(
        self,
        step: int,
        batch: list[Experience],
        engine: TrainerEngine,
        metrics: MetricEmitter,
        wait_s: float,
    ) -> None:
        started = time.monotonic()
        with tracer.start_as_current_span("trainer.step") as span:
            span.set_attribute("rft.step", step)
            span.set_attribute("rft.batch_size", len(batch))
            groups: dict[str, int] = {}
            group_index = torch.tensor(
                [groups.setdefault(e.group_id, len(groups)) for e in batch], dtype=torch.long
            )
            rewards = torch.tensor([e.reward for e in batch], dtype=torch.float32)
            # numpy arrays serve as the engine's integer and float sequences
            train_batch = TrainBatch(
                prompt_ids=cast(list[Sequence[int]], [e.prompt_ids for e in batch]),
                response_ids=cast(list[Sequence[int]], [e.response_ids for e in batch]),
                old_logprobs=cast(list[Sequence[float]], [e.logprobs for e in batch]),
                action_mask=cast(
                    list[Sequence[int]],
                    [
                        e.action_mask.astype(np.int8)
                        if e.action_mask is not None
                        else np.ones(e.response_length, dtype=np.int8)
                        for e in batch
                    ],
                ),
                advantages=[],
                # each row is recomputed at the temperature its logprobs were sampled at
                temperatures=[e.logprob_temperature for e in batch],
            )
            adv_metrics = self._set_advantages(train_batch, rewards, group_index, engine)
            values = engine.train_step(train_batch, EngineLoss(self.loss))
        elapsed = time.monotonic() - started
        staleness = np.array([step - 1 - e.model_version for e in batch], dtype=np.float64)
        rewards_np = rewards.numpy().astype(np.float64)
        values |= {f"adv/{k}": v for k, v in adv_metrics.items()}
        values |= {
            "reward_mean": float(rewards_np.mean()),
            "staleness_min": float(staleness.min()),
            "staleness_mean": float(staleness.mean()),
            "staleness_max": float(staleness.max()),
            "step_time_s": elapsed,
            "wait_time_s": wait_s,
            "dropped_stale_total": float(self.summary.dropped_stale),
        }
        self.summary.experiences += len(batch)
        self.summary.step_seconds.append(elapsed)
        metrics.emit(step, values)

    def _set_advantages(
        self,
        batch: TrainBatch,
        rewards: torch.Tensor,
        group_index: torch.Tensor,
        engine: TrainerEngine,
    ) -> dict[str, float]:
        """Fill `batch.advantages`; with a reward KL penalty (kl_penalty_fn) the rewards first
        lose kl_penalty_coef × the response's KL(rollout policy ‖ reference) estimate."""
        if not self.spec.uses_kl_penalty:
            seq_mask = torch.ones((len(batch), 1), dtype=torch.float32)
            adv, metrics = compute_advantages(self.spec, rewards, group_index, seq_mask)
            batch.advantages = [float(a) for a in adv[:, 0]]
            return metrics
        batch.advantages = [0.0] * len(batch)  # not read by reference_logprobs
        padded = engine.reference_logprobs(batch)
        adv, metrics = compute_advantages(
            self.spec,
            rewards,
            group_index,
            padded["action_mask"],
            logprob=padded["old_logprobs"],
            ref_logprob=padded["ref_logprobs"],
        )
        batch.advantages = [
            adv[i, : len(r)].numpy().astype(np.float32) for i, r in enumerate(batch.response_ids)
        ]
        return metrics

    def _publish(
        self,
        step: int,
        parent: int,
        engine: TrainerEngine,
        checkpoints: TrainerCheckpointer,
        ledger: OffsetLedger,
        writer: EventWriter,
        *,
        final: bool,
    ) -> None:
        """Checkpoint first (manifest last), then announce: readers trust only what is verified."""
        started = time.monotonic()
        with tracer.start_as_current_span("trainer.publish") as span:
            span.set_attribute("rft.version", step)
            offsets = [(t, p, o) for (t, p), o in sorted(ledger.safe_offsets().items())]
            manifest = checkpoints.write(engine, step, parent, offsets, final=final)
            event = WeightVersion(
                version=step,
                train_step=step,
                uri=checkpoints.store.uri(step),
                manifest=tuple(ManifestEntry(f.name, f.size, f.sha256) for f in manifest.files),
                consumed_offsets=tuple(TopicOffset(t, p, o) for t, p, o in offsets),
                parent_version=parent,
            )
            writer.send(self.plan.topics.weights, event, key=b"weights")
            writer.flush()
        keep = self.cfg.trainer.max_checkpoints_to_keep
        if keep:
            checkpoints.store.prune(keep_last=keep)
        self.summary.published_versions.append(step)
        log.info("published weight version %d in %.1fs", step, time.monotonic() - started)
