"""RunPlan: what every process of one run derives from its config in the same way.

Topic names, consumer-group ids, the number of steps, the model spec and the checkpoint store all
follow from the config, so the explorer, the trainer and the supervisor (separate processes, maybe
separate machines) agree on them without talking to each other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from rft.config import RftConfig
from rft.config.derived import OWN_EXPERIENCES, TRAINER_EXPERIENCES, own_experience_topic
from rft.config.stream_start import StreamStart, parse_stream_start
from rft.errors import ConfigError
from rft.events.topics import TopicNames, ensure_topics
from rft.producers.taskset_reader import load_taskset
from rft.storage.checkpoint_store import CheckpointStore
from rft.storage.object_store import open_object_store

if TYPE_CHECKING:  # torch and transformers stay out of processes that only coordinate
    from rft.engines.auxiliary_models import AuxiliaryModels
    from rft.engines.models import ModelSpec
    from rft.engines.rollout import RolloutEngineConfig

# Set by a launcher that gives a process devices of its own (the ray launcher: Ray's
# CUDA_VISIBLE_DEVICES shows it only its bundle's GPUs, so its first GPU is cuda:0)
PLACED_DEVICE_ENV = "RFT_DEVICE"


@dataclass(frozen=True)
class RunPlan:
    cfg: RftConfig

    @cached_property
    def topics(self) -> TopicNames:
        return TopicNames.for_run(self.cfg.project, self.cfg.name)

    @property
    def run_id(self) -> str:
        return f"{self.cfg.project}.{self.cfg.name}"

    @property
    def explorer_group(self) -> str:
        """One consumer group per explorer name: processes of one name share the tasks."""
        return f"{self.run_id}.explorer.{self.cfg.explorer.name}"

    @property
    def trainer_group(self) -> str:
        return f"{self.run_id}.trainer.{self.cfg.trainer.name}"

    @property
    def trainer_transactional_id(self) -> str:
        """One per run, whatever the trainer's name: the trainers of a run share its checkpoint
        store, so a second one must fence the first (its epoch bump) rather than run beside it."""
        return f"{self.run_id}.trainer"

    def explorer_transactional_id(self, explorer_id: str) -> str:
        """One per explorer id: a second process with the same id fences the first."""
        return f"{self.explorer_group}.{explorer_id}"

    @property
    def experience_topic(self) -> str:
        return self.cfg.buffer.trainer_input.experience_buffer.topic or self.topics.experiences

    @property
    def explorer_experience_topic(self) -> str:
        """Where this explorer group's experiences go (`explorer.experiences_to`): the trainer's
        topic, a topic of the group's own (a shadow explorer), or the topic named."""
        target = self.cfg.explorer.experiences_to
        if target == TRAINER_EXPERIENCES:
            return self.experience_topic
        if target == OWN_EXPERIENCES:
            return own_experience_topic(self.cfg.project, self.cfg.name, self.cfg.explorer.name)
        return target

    @property
    def feeds_trainer(self) -> bool:
        """Whether this explorer group's experiences reach the trainer."""
        return self.explorer_experience_topic == self.experience_topic

    @property
    def tasks_start(self) -> StreamStart:
        """Where a new explorer group first reads the tasks (`explorer.tasks_from`)."""
        return parse_stream_start(self.cfg.explorer.tasks_from)

    @property
    def explorer_count(self) -> int:
        """Explorer processes the group is sized for: `explorer.max_explorers`, else one per
        rollout engine (what the ray launcher starts)."""
        ex = self.cfg.explorer
        return ex.max_explorers or ex.rollout_model.engine_num

    @property
    def topic_partitions(self) -> dict[str, int]:
        """Partitions of the run's topics where they differ from `stack.kafka.partitions`.

        The rule: the tasks topic gets max(stack.kafka.partitions, explorer_count), because a
        partition is the unit a consumer group shares out: with fewer partitions than members,
        the extra members of a group get no tasks.
        """
        kafka = self.cfg.stack.kafka
        return {self.topics.tasks: max(kafka.partitions, self.explorer_count)}

    def ensure_topics(self, *extra: str) -> list[str]:
        """Create the run's topics (and `extra` ones) that do not exist, sized by
        `topic_partitions`; return the names created."""
        return ensure_topics(
            self.cfg.stack.kafka,
            list(dict.fromkeys([*self.topics.all(), *extra])),
            partitions=self.topic_partitions,
        )

    def explorer_consumer_config(self, explorer_id: str) -> dict[str, int | str]:
        """The task consumer of one explorer process: the shared settings, cooperative-sticky
        rebalancing (a member joining or leaving moves only the partitions that must move; the
        others keep exploring) and static membership: `group.instance.id` is the explorer id,
        so a process restarted with the same `--explorer-id` within the session timeout takes
        its partitions back without a rebalance of the whole group."""
        return {
            **self.consumer_config,
            "partition.assignment.strategy": "cooperative-sticky",
            "group.instance.id": explorer_id,
        }

    @property
    def consumer_config(self) -> dict[str, int]:
        """Client settings of the explorer's and trainer's consumers.

        Kafka drops a member that does not poll within `max.poll.interval.ms` (default 5 min),
        and its commits then fail. A step, an evaluation or a retried rollout on a slow CPU can
        take longer, so members get an hour, or more when explorer.max_timeout x
        (max_retry_times + 1) needs it. A crashed process is still noticed within the session
        timeout: heartbeats come from the client's own thread.
        """
        ex = self.cfg.explorer
        worst_rollout_s = ex.max_timeout * (ex.max_retry_times + 1)
        return {"max.poll.interval.ms": int(max(3600.0, 2 * worst_rollout_s) * 1000)}

    @property
    def repeat_times(self) -> int:
        return self.cfg.algorithm.repeat_times

    @property
    def batch_size(self) -> int:
        """Tasks per explorer step (derived from train_batch_size when only that is given)."""
        assert self.cfg.buffer.batch_size is not None  # filled or refused when the config loads
        return self.cfg.buffer.batch_size

    @property
    def train_batch_size(self) -> int:
        assert self.cfg.buffer.train_batch_size is not None  # filled when the config loads
        return self.cfg.buffer.train_batch_size

    @cached_property
    def total_steps(self) -> int:
        """Explorer steps = trainer steps: buffer.total_steps, else the full batches in the
        taskset's epochs."""
        if self.cfg.trainer.total_steps is not None:
            return self.cfg.trainer.total_steps
        if self.cfg.buffer.total_steps is not None:
            return self.cfg.buffer.total_steps
        taskset = self.cfg.buffer.explorer_input.taskset
        if taskset is None:
            raise ValueError("buffer.total_steps or buffer.explorer_input.taskset is required")
        rows = len(load_taskset(taskset, on_bad_rows="skip-and-report").rows)
        # whole batches only: a last, partial one could never fill a train batch (the config's
        # load says how many tasks that leaves out: rft.config.run_length)
        return rows * self.cfg.buffer.total_epochs // self.batch_size

    @property
    def on_gpus(self) -> bool:
        """GPUs to compute on: some in the cluster, and `cluster.device` not `cpu`."""
        return self.cfg.cluster.gpu_per_node > 0 and self.cfg.cluster.device != "cpu"

    @property
    def explorer_device(self) -> str:
        """`cpu` without GPUs; else the first `engine_num × tensor_parallel_size` GPUs (cuda:0)."""
        if not self.on_gpus:
            return "cpu"
        return os.environ.get(PLACED_DEVICE_ENV) or "cuda:0"

    @property
    def trainer_device(self) -> str:
        """The first GPU after the explorer's, or the explorer's own when there is no spare one.

        As in Trinity-RFT the rollout engines take the first GPUs of the node and the trainer the
        rest; the torch trainer engine uses one device. A process placed on GPUs of its own (the
        ray launcher) computes where PLACED_DEVICE_ENV says.
        """
        if not self.on_gpus:
            return "cpu"
        placed = os.environ.get(PLACED_DEVICE_ENV)
        if placed:
            return placed
        gpus = self.cfg.cluster.gpu_per_node
        rm = self.cfg.explorer.rollout_model
        explorer_gpus = rm.engine_num * rm.tensor_parallel_size
        return f"cuda:{explorer_gpus}" if gpus > explorer_gpus else "cuda:0"

    @property
    def trainer_devices(self) -> tuple[str, ...]:
        """One device per trainer rank (`trainer.world_size`): the CPU, or the GPUs after the
        explorer's, rank 0 on `trainer_device`."""
        ranks = self.cfg.trainer.world_size or 1
        first = self.trainer_device
        if first == "cpu":
            return ("cpu",) * ranks
        index = int(first.removeprefix("cuda:"))
        return tuple(f"cuda:{index + r}" for r in range(ranks))

    @staticmethod
    def resolve_dtype(dtype: str, device: str) -> str:
        """`auto` is bfloat16 on a GPU and float32 on the CPU; other names stay as they are."""
        if dtype != "auto":
            return dtype
        return "bfloat16" if device.startswith("cuda") else "float32"

    @property
    def rollout_dtype(self) -> str:
        """The dtype explorers roll out in, and so the dtype weight versions are published in."""
        rm = self.cfg.explorer.rollout_model
        return self.resolve_dtype(rm.dtype or self.cfg.model.dtype, self.explorer_device)

    def model_spec(self, *, dtype: str | None = None, device: str = "cpu") -> ModelSpec:
        from rft.engines.models import ModelSpec

        return ModelSpec(
            name_or_path=self.cfg.model.model_path,
            dtype=self.resolve_dtype(dtype or self.cfg.model.dtype, device),
            device=device,
            seed=self.cfg.explorer.rollout_model.seed,
        )

    def teacher_spec(self, *, dtype: str, device: str) -> tuple[ModelSpec, str]:
        """The model a distillation run's trainer loads as its teacher, and the config entry it
        comes from: `explorer.auxiliary_models[0]`'s model_path (checked at load: present, with
        local weights, not the student's own), in the trainer's `dtype` on `device`."""
        from rft.engines.models import ModelSpec

        where = "explorer.auxiliary_models[0]"
        entries = self.cfg.explorer.auxiliary_models
        if not entries or entries[0].model_path is None:
            raise ConfigError(f"{where}.model_path: a distillation run needs its teacher's path")
        return (
            ModelSpec(
                name_or_path=entries[0].model_path,
                dtype=dtype,
                device=device,
                seed=self.cfg.explorer.rollout_model.seed,
            ),
            where,
        )

    def rollout_engine_config(self) -> RolloutEngineConfig:
        """What the explorer's rollout engine is built from: the model on the explorer's device
        and the engine settings of `explorer.rollout_model` (each engine reads its own)."""
        from rft.engines.rollout import ROLLOUT_ENGINES, RolloutEngineConfig

        rm = self.cfg.explorer.rollout_model
        taskset = self.cfg.buffer.explorer_input.taskset
        threads = int(os.environ.get("RFT_NUM_THREADS", "0")) or None
        # the engine's entry names the settings it reads (`reads`): explorer.rollout_model keys,
        # and the training taskset's temperature
        settings = {"temperature": taskset.rollout_args.temperature if taskset else 1.0}
        reads = ROLLOUT_ENGINES.spec(rm.engine_type).reads
        options: dict[str, Any] = {
            key: settings[key] if key in settings else getattr(rm, key) for key in reads
        }
        options |= rm.part_keys  # the engine's own keys, bound at load (rft.catalog.part_keys)
        options |= rm.engine_args  # checked at load against the keys the engine's entry reads
        if self.cfg.model.lora_configs:  # an engine that serves adapters sizes itself for this one
            options["max_lora_rank"] = self.cfg.model.lora_configs[0].lora_rank
        return RolloutEngineConfig(
            model=self.model_spec(dtype=self.rollout_dtype, device=self.explorer_device),
            num_threads=threads,
            options=options,
        )

    def auxiliary_models(self) -> AuxiliaryModels:
        """The roster of `explorer.auxiliary_models`, none built yet (each is built on its first
        call). An hf / vllm one loads its `model_path` (default: model.model_path) on the
        explorer's device, in its `dtype` (default: model.dtype); each engine reads the settings
        its entry names (`reads`) from the entry's own keys and its `engine_args`."""
        from rft.engines.auxiliary_models import AuxiliaryModels, AuxiliarySpec
        from rft.engines.models import ModelSpec
        from rft.engines.rollout import ROLLOUT_ENGINES, RolloutEngineConfig

        specs = []
        for i, aux in enumerate(self.cfg.explorer.auxiliary_models):
            assert aux.name is not None  # filled when the config is loaded
            reads = ROLLOUT_ENGINES.spec(aux.engine_type).reads
            options: dict[str, Any] = {
                key: getattr(aux, key) for key in reads if getattr(aux, key, None) is not None
            }
            options |= aux.engine_args  # checked at load against what the engine reads
            device = self.explorer_device
            model = ModelSpec(
                name_or_path=aux.model_path or self.cfg.model.model_path,
                dtype=self.resolve_dtype(aux.dtype or self.cfg.model.dtype, device),
                device=device,
                seed=self.cfg.explorer.rollout_model.seed,
            )
            specs.append(
                AuxiliarySpec(
                    name=aux.name,
                    engine_type=aux.engine_type,
                    where=f"explorer.auxiliary_models[{i}]",
                    engine=RolloutEngineConfig(model=model, options=options),
                    chat_template=aux.chat_template,
                    enable_thinking=aux.enable_thinking,
                )
            )
        return AuxiliaryModels.of(specs)

    def checkpoint_store(self) -> CheckpointStore:
        settings = self.cfg.stack.object_store
        store = open_object_store(settings.uri or settings, settings)
        return CheckpointStore(store, self.cfg.project, self.cfg.name)
