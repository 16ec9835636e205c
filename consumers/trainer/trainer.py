"""Trainer: a consumer of Experience events that batches, trains and publishes weight versions.

`Trainer` builds one run's parts from the config (engine, checkpointer, sampler, Kafka clients)
and hands them to a `TrainerLoop` (rft.consumers.trainer.loop), which owns them while it runs. The
sampler (`algorithm.sample_strategy`) keeps rollout groups whole, judges staleness when a batch
forms, and may replay or mix in demonstrations; each batch becomes one optimizer step of the
configured algorithm (rft.consumers.trainer.train_step). A restarted trainer resumes from its newest weight
version: weights, optimizer, step, the manifest's consumed offsets and the sampler's state.

Given an `OfflineSource` (`rft train --from-topic`), the same trainer reads a range of an existing
experience topic instead of its consumer group, with no explorer, and stops at the range's end
(rft.consumers.trainer.offline_input says how staleness and filters work there). Its weight versions, metrics
and checkpoints belong to the config's run, whatever run wrote the topic.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
from typing import Any

from rft.algorithms.objective import build_loss
from rft.algorithms.presets import resolve_algorithm
from rft.buffer.experience_pipeline import ExperiencePipeline
from rft.buffer.expert_source import ExpertContext, open_expert_sources
from rft.buffer.group_sampler import SamplerSetup
from rft.buffer.replay_buffer import replay_settings
from rft.buffer.sample_strategy import build_sampler, sampler_choice
from rft.buffer.sampler import Sampler
from rft.buffer.staleness import StalenessPolicy
from rft.config import RftConfig
from rft.config.connections import KafkaSettings
from rft.consumers.replay.mirror import experience_mirror
from rft.consumers.replay.topic_range import RangeReader
from rft.consumers.run_plan import RunPlan
from rft.consumers.tasks.left import tasks_left
from rft.consumers.trainer.checkpoint import TrainerCheckpointer
from rft.consumers.trainer.explorer_roster import ExplorerRoster
from rft.consumers.trainer.loop import InputEnd, LoopClients, TrainerLoop, TrainerSummary
from rft.consumers.trainer.offline_input import (
    DATASET,
    OFFLINE,
    STATE_KEY,
    OfflineExperiences,
    OfflineSource,
    admit_rule,
    offline_state,
    offline_total_steps,
    resolve_range,
    without_staleness,
)
from rft.consumers.trainer.train_step import StepTrainer
from rft.consumers.trainer.versions_in_use import versions_in_use
from rft.contact.first_contact import require_kafka, require_object_store
from rft.engines.chat_template import configured_chat_template
from rft.engines.critic import Critic, CriticSettings
from rft.engines.lora import DEFAULT_ADAPTER_NAME, LoraSpec
from rft.engines.models import load_model, torch_dtype
from rft.engines.teacher import STATE_KEY as TEACHER_KEY
from rft.engines.teacher import TeacherRecord, check_recorded, load_teacher
from rft.engines.trainer import (
    TRAINER_ENGINES,
    TorchTrainerConfig,
    TrainerEngine,
    TrainerPlacement,
)
from rft.errors import ConfigError
from rft.events.claims import Claims
from rft.events.models import WeightVersion
from rft.events.reader import EventReader, Resume
from rft.events.transport import kafka_backend
from rft.events.writer import EventWriter
from rft.producers.metric_emitter import MetricEmitter
from rft.producers.status_announcer import StatusAnnouncer
from rft.producers.task_selectors import is_online
from rft.synchronizer import build_sync_style
from rft.synchronizer.fast_path import trainer_end

__all__ = [
    "Trainer",
    "TrainerSummary",
    "critic_settings",
    "master_dtype",
    "trainer_engine_config",
]

# The broker's default limit on transaction.timeout.ms (transaction.max.timeout.ms).
BROKER_MAX_TRANSACTION_S = 900.0


def trainer_transaction_config(kafka: KafkaSettings) -> dict[str, int]:
    """The trainer's transactions outlive an outage the window rides out: a broker aborts a
    transaction older than transaction.timeout.ms by fencing its producer (60 s by default, and
    an announcement staged when the broker went down was fenced so). Safe for the trainer: a
    restarted trainer claims the same id, which aborts what a dead one left open at once."""
    if "transaction.timeout.ms" in kafka.extra:
        return {}
    limit_s = min(kafka.outage_timeout + 60.0, BROKER_MAX_TRANSACTION_S)
    return {"transaction.timeout.ms": int(limit_s * 1000)}


log = logging.getLogger(__name__)


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
        lora=lora_spec(cfg),
        max_tokens_per_micro_batch=token_budget(cfg),
        gradient_checkpointing=cfg.trainer.enable_gradient_checkpointing,
        param_offload=cfg.trainer.param_offload,
        optimizer_offload=cfg.trainer.optimizer_offload,
    )


def token_budget(cfg: RftConfig) -> int | None:
    """Padded tokens per micro-batch with trainer.use_dynamic_bsz (max_token_len_per_gpu, or
    verl's ppo_max_token_len_per_gpu, default 2 × the model's length), else None: rows."""
    trainer = cfg.trainer
    if not trainer.use_dynamic_bsz:
        return None
    given = trainer.max_token_len_per_gpu or trainer.ppo_max_token_len_per_gpu
    if given is not None:
        return given
    model = cfg.model
    return 2 * (model.max_model_len or model.max_prompt_tokens + model.max_response_tokens)


def lora_spec(cfg: RftConfig) -> LoraSpec | None:
    """The adapter `model.lora_configs` asks the trainer to train (one entry at most: the load
    refuses more), or None to train the full model."""
    if not cfg.model.lora_configs:
        return None
    entry = cfg.model.lora_configs[0]
    return LoraSpec(
        rank=entry.lora_rank,
        alpha=entry.lora_alpha,
        target_modules=tuple(entry.target_modules),
        exclude_modules=tuple(entry.exclude_modules),
        name=entry.name or DEFAULT_ADAPTER_NAME,
        base_model=entry.base_model_name or cfg.model.model_path,
    )


def critic_settings(cfg: RftConfig) -> CriticSettings:
    """The `critic` section as the engine's critic takes it."""
    critic = cfg.critic
    return CriticSettings(
        lr=critic.optim.lr,
        betas=(float(critic.optim.betas[0]), float(critic.optim.betas[1])),
        weight_decay=critic.optim.weight_decay,
        grad_clip=critic.grad_clip,
        cliprange_value=critic.cliprange_value,
        loss_agg_mode=critic.loss_agg_mode,
    )


class Trainer:
    def __init__(
        self,
        cfg: RftConfig,
        *,
        idle_timeout_s: float | None = None,
        offline: OfflineSource | None = None,
    ) -> None:
        self.cfg = cfg
        self.offline = offline
        self.plan = RunPlan(cfg)
        self.spec = resolve_algorithm(cfg.algorithm)
        self.loss = build_loss(self.spec)
        self.style = build_sync_style(
            cfg.synchronizer.sync_style,
            cfg.synchronizer.sync_interval,
            cfg.synchronizer.sync_offset,
        )
        self.sample_strategy, self.sample_strategy_args = sampler_choice(
            self.spec.sample_strategy,
            self.spec.sample_strategy_args,  # the preset's, with the config's over them
            cfg.buffer.trainer_input.max_staleness,
        )
        if offline is not None:  # a dataset is trained as an offline range of its topic
            why = DATASET if self.spec.dataset is not None else OFFLINE
            self.sample_strategy_args = without_staleness(self.sample_strategy_args, why)
        self.staleness = StalenessPolicy(self.sample_strategy_args.get("max_staleness"))
        self.idle_timeout_s = (
            idle_timeout_s
            if idle_timeout_s is not None
            else cfg.buffer.trainer_input.experience_buffer.max_read_timeout
        )
        self.summary = TrainerSummary()
        self.teacher: TeacherRecord | None = None  # a distillation run's, once loaded

    def run(self, stop: threading.Event | None = None) -> TrainerSummary:
        kafka = self.cfg.stack.kafka
        topics = self.plan.topics
        # an address that never answers is a config error, found in seconds (first_contact.py)
        require_kafka(kafka)
        require_object_store(self.plan.checkpoint_store().store, create_bucket=True)
        self.plan.ensure_topics()
        checkpoints = TrainerCheckpointer(
            self.plan.checkpoint_store(),
            self.cfg.trainer.save_interval,
            weights_dtype=torch_dtype(self.plan.rollout_dtype),
            fast=trainer_end(self.cfg.synchronizer, self.plan.trainer_device),
        )
        control_group = f"{self.plan.run_id}.trainer-control.{self.cfg.trainer.name}"
        with contextlib.ExitStack() as stack:
            # the last to run on the way out: a training state still being written completes
            stack.callback(checkpoints.close)
            writer = stack.enter_context(
                EventWriter.open(
                    kafka,
                    transactional_id=self.plan.trainer_transactional_id,
                    config=trainer_transaction_config(kafka),
                )
            )
            # Claim the run before reading its newest version: a trainer already running on it
            # is fenced from here on and can announce nothing more (its next transaction fails).
            claims = Claims(kafka, topics.control, self.plan.trainer_transactional_id)
            claims.claim(writer)
            log.info(
                "trainer holds transactional id %r: any earlier trainer of this run is fenced",
                self.plan.trainer_transactional_id,
            )
            spans = None
            if self.offline is None:
                total_steps = self.plan.total_steps
            else:
                newest = (
                    checkpoints.store.latest_version() if self.cfg.continue_from_checkpoint else 0
                )
                spans = resolve_range(
                    kafka,
                    self.offline,
                    # a version without saved state is treated as an online trainer's: refused
                    (checkpoints.read_sampler_state(newest) or {}) if newest else None,
                )
                total_steps = offline_total_steps(
                    self._configured_steps(), spans, self.plan.train_batch_size
                )
            engine, tokenizer = self._engine(total_steps)
            stack.enter_context(contextlib.closing(engine))  # stops the engine's other ranks
            step, resume_offsets = (
                checkpoints.restore(engine) if self.cfg.continue_from_checkpoint else (0, {})
            )
            # while the trainer waits for its first batch (a model's moments exist by now)
            checkpoints.reserve_host_memory(engine)
            saved = checkpoints.read_sampler_state(step) if step else None
            if self.teacher is not None:
                check_recorded(self.teacher, (saved or {}).get(TEACHER_KEY), step)
            offline_reader = None
            reader: EventReader | OfflineExperiences
            if spans is None:
                reader = stack.enter_context(
                    EventReader.open(
                        kafka,
                        self.plan.trainer_group,
                        [self.plan.experience_topic],
                        from_beginning=True,
                        dead_letter_topic=topics.dead_letter,
                        config=self.plan.consumer_config,
                        # its ledger and manifest say what it consumed, never the group's offset
                        resume=Resume.CONTINUE,
                    )
                )
            else:
                # the trainer's own poll interval: a step may take longer than Kafka's default
                reader = offline_reader = OfflineExperiences.open(
                    kafka, spans, self.plan.consumer_config
                )
                stack.callback(offline_reader.close)
            # From the beginning: a request sent before this group's first assignment must not
            # be lost; requests that a published version already answers are ignored. The group
            # never commits, so a restarted trainer parks an undecodable request again.
            control = stack.enter_context(
                EventReader.open(
                    kafka,
                    control_group,
                    [topics.control],
                    from_beginning=True,
                    dead_letter_topic=topics.dead_letter,
                    resume=Resume.CONTINUE,
                )
            )
            mirror = stack.enter_context(experience_mirror(self.cfg, tokenizer.decode))
            sampler = self._sampler(tokenizer, stack)
            status = StatusAnnouncer(
                writer,
                topics.control,
                "trainer",
                self.cfg.trainer.name,
                self.plan.trainer_group,
                total_steps,
                experience_topic=self.offline.topic
                if self.offline is not None
                else self.plan.experience_topic,
                transactional=True,
            )
            clients = LoopClients(
                experiences=reader,
                control=control,
                writer=writer,
                metrics=MetricEmitter(writer, topics.metrics, "trainer", self.plan.run_id),
                weights_topic=topics.weights,
                mirror=mirror,
                status=status,
            )
            loop = TrainerLoop(
                clients,
                sampler,
                StepTrainer(self.spec, self.loss, engine, self.cfg.model.max_response_tokens),
                checkpoints,
                self.style,
                total_steps=total_steps,
                idle_timeout_s=self.idle_timeout_s,
                keep_checkpoints=self.cfg.trainer.max_checkpoints_to_keep,
                versions_in_use=functools.partial(
                    versions_in_use, kafka, topics, self.plan.experience_topic
                ),
                stop=stop,
                run_id=self.plan.run_id,
                claims=claims,
                batch_size=self.plan.train_batch_size,
                pipeline=self._pipeline(),
                input_end=self._input_end(reader, total_steps)
                if isinstance(reader, EventReader)
                else None,
                **self._loop_args(offline_reader),
            )
            loop.summary = self.summary
            if self.cfg.continue_from_checkpoint and isinstance(reader, EventReader):
                # A partition the newest version names resumes at its offset; every other one
                # from its beginning, never from the group's committed offset: that commit is
                # for monitoring only, and a trainer killed before its first version committed
                # experiences no version trained (they would be skipped, and lost)
                reader.seek_to_beginning()
            loop.resume(step, resume_offsets, saved)
            loop.announce_resumed(announced_versions(kafka, topics.weights))
            status.announce("running", step=step)
            while loop.tick():
                pass
            summary = loop.finish()
            status.announce(
                "finished",
                step=summary.steps,
                reason=finish_reason(summary),
                detail=summary.stop_reason,
            )
            return summary

    # -- parts ------------------------------------------------------------------------------------

    def _configured_steps(self) -> int | None:
        if self.cfg.trainer.total_steps is not None:
            return self.cfg.trainer.total_steps
        return self.cfg.buffer.total_steps

    def _input_end(self, reader: EventReader, total_steps: int) -> InputEnd | None:
        """How an online trainer learns that the explorers can send nothing more. Not with a
        replay cooldown: replayed groups make batches again later without new experiences."""
        replay = replay_settings(self.cfg.buffer.trainer_input.experience_buffer)
        if replay is not None and replay.reuse_cooldown_time is not None:
            return None
        kafka, plan = self.cfg.stack.kafka, self.plan
        taskset = self.cfg.buffer.explorer_input.taskset
        roster = ExplorerRoster(
            experience_topic=plan.experience_topic,
            total_steps=total_steps,
            own_group=plan.explorer_group if plan.feeds_trainer else None,
            own_size=plan.explorer_count,
            online_tasks=taskset is not None and is_online(taskset.task_selector.selector_type),
            tasks_left=functools.partial(tasks_left, kafka, plan.topics.tasks),
        )

        def unread() -> dict[tuple[str, int], tuple[int, int]]:
            """(position, last stable offset) of each partition not read to its end."""
            with kafka_backend(kafka).admin() as admin:
                bounds = admin.partition_bounds([plan.experience_topic], committed=True)
            positions = reader.positions()
            out = {}
            for b in bounds:
                at = positions.get((b.topic, b.partition), b.low if b.low == b.high else -1)
                if at < b.high:
                    out[(b.topic, b.partition)] = (at, b.high)
            return out

        def in_open_transactions() -> str:
            """Partitions with records past their last stable offset: an open transaction, or
            one the broker left hanging when it outlasts the producers' transaction timeout."""
            with kafka_backend(kafka).admin() as admin:
                stable = admin.partition_bounds([plan.experience_topic], committed=True)
                written = admin.partition_bounds([plan.experience_topic])
            ends = {(b.topic, b.partition): b.high for b in written}
            pending = [
                f"{b.topic}[{b.partition}] {ends[(b.topic, b.partition)] - b.high} record(s) "
                f"after offset {b.high}"
                for b in stable
                if ends.get((b.topic, b.partition), b.high) > b.high
            ]
            if not pending:
                return ""
            return (
                f"; in an open transaction: {', '.join(pending)} (open longer than "
                "transaction.timeout.ms: a transaction the broker left hanging, see "
                "docs/known-limits.md)"
            )

        def position() -> str:
            left = unread()
            if not left:
                return f"{plan.experience_topic}: at its end{in_open_transactions()}"
            return ", ".join(
                f"{t}[{p}] at {'?' if at < 0 else at} of {end}"
                for (t, p), (at, end) in sorted(left.items())
            )

        return InputEnd(roster, caught_up=lambda: not unread(), position=position)

    def _loop_args(self, reader: OfflineExperiences | None) -> dict[str, Any]:
        """The offline rules (`_offline_loop_args`), and the teacher's record saved with each
        version beside them."""
        args = self._offline_loop_args(reader)
        if self.teacher is not None:
            args["extra_state"] = {
                **args.get("extra_state", {}),
                TEACHER_KEY: self.teacher.state(),
            }
        return args

    def _offline_loop_args(self, reader: OfflineExperiences | None) -> dict[str, Any]:
        """The loop's offline rules: the admit filter, the end of the range, the saved range."""
        if reader is None or self.offline is None:
            return {}
        return {
            "admit": admit_rule(self.offline, self.spec.use_advantage, self.spec.algorithm_type),
            "input_ended": lambda: reader.exhausted,
            "extra_state": {STATE_KEY: offline_state(self.offline.topic, reader.reader.spans)},
        }

    def _engine(self, total_steps: int) -> tuple[TrainerEngine, Any]:
        """The trainer engine with the base model (its KL reference) before any checkpoint."""
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
        # trainer_type / trainer_strategy pick the engine, world_size sets its ranks
        engine = TRAINER_ENGINES.get(self.cfg.trainer.engine_name)(
            model, tokenizer, engine_config, TrainerPlacement(self.plan.trainer_devices)
        )
        if self.spec.use_critic:
            attach = getattr(engine, "attach_critic", None)
            if attach is None:  # the load refuses this (rft.catalog.parts), said again here
                raise ConfigError(
                    f"trainer.trainer_type: the {self.cfg.trainer.engine_name} engine cannot "
                    "train a critic"
                )
            attach(self._critic(master_dtype(compute_dtype), device))
        if self.spec.uses_teacher:
            # the teacher scores in the reference model's place (the engine's entry has the
            # trait `teacher`, checked at load)
            teacher_spec, where = self.plan.teacher_spec(
                dtype=master_dtype(compute_dtype), device=device
            )
            teacher, self.teacher = load_teacher(teacher_spec, tokenizer, where)
            engine.set_reference_model(teacher)  # type: ignore[attr-defined]
            log.info(
                "teacher %s loaded (weights sha256 %s)",
                self.teacher.model_path,
                self.teacher.weights_sha256,
            )
        return engine, tokenizer

    def _critic(self, dtype: str, device: str) -> Critic:
        """The critic: a value head on model.critic_model_path's decoder (default: the policy's
        base model), with the `critic` section's AdamW and value loss."""
        spec = self.plan.model_spec(dtype=dtype, device=device)
        path = self.cfg.model.critic_model_path or spec.name_or_path
        lm, _ = load_model(dataclasses.replace(spec, name_or_path=path))
        return Critic.of_lm(lm, critic_settings(self.cfg))

    def _pipeline(self) -> ExperiencePipeline | None:
        """data_processor.experience_pipeline's operators, or None when it names none."""
        operators = self.cfg.data_processor.experience_pipeline.operators
        if not operators:
            return None
        return ExperiencePipeline.of([(op.name, op.args) for op in operators])

    def _sampler(self, tokenizer: Any, stack: contextlib.ExitStack) -> Sampler:
        """The configured sample strategy, with the auxiliary buffers it may read."""
        model = self.cfg.model
        context = ExpertContext(
            tokenizer=tokenizer,
            max_prompt_tokens=model.max_prompt_tokens,
            max_response_tokens=model.max_response_tokens,
            chat_template=configured_chat_template(
                model.custom_chat_template, model.chat_template_path
            ),
            kafka=self.cfg.stack.kafka,
            group_prefix=self.plan.run_id,
            dead_letter_topic=self.plan.topics.dead_letter,
        )
        sources = open_expert_sources(self.cfg.buffer.trainer_input.auxiliary_buffers, context)
        for source in sources.values():
            stack.callback(source.close)
        setup = SamplerSetup(
            train_batch_size=self.plan.train_batch_size,
            replay=replay_settings(self.cfg.buffer.trainer_input.experience_buffer),
            expert_sources=sources,
        )
        return build_sampler(self.sample_strategy, self.sample_strategy_args, setup)


def finish_reason(summary: TrainerSummary) -> str:
    """The ComponentStatus reason of a trainer that ended as `summary` says."""
    if summary.short:
        return "short"
    if summary.stop_reason == "stop signal":
        return "stopped"
    if summary.input_ended:
        return "input_ended"
    return "total_steps"


def announced_versions(kafka: KafkaSettings, weights_topic: str) -> set[int]:
    """The versions announced on `weights_topic` now (read_committed, one event per version)."""
    with RangeReader.open(kafka, [weights_topic]) as reader:
        return {
            env.event.version
            for batch in reader.batches()
            for env in batch
            if isinstance(env.event, WeightVersion)
        }
