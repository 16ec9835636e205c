"""The typed run config: one dataclass per section, with Trinity-RFT key names and meanings.

Values are checked once by the loader (types, bounds, allowed values, and every name that selects a
registered part against its registry: `rft.catalog.parts`) and derived defaults are filled there; the
rest of rft trusts these objects. Trinity-RFT keys that do not apply to rft are listed in each
section's IGNORED_KEYS: a carried-over YAML loads, with a warning per such key saying what happens
instead. `rft.config.key_fates` names, for every field, the code that acts on it.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml

from rft.config.binding import Alias, bounded
from rft.config.connections import StackSettings

Mode = Literal["both", "explore", "train", "bench"]
DType = Literal["float32", "bfloat16", "float16", "auto"]
TasksetStorage = Literal["file", "generator"]
# kafka/queue: the Kafka topic; sql: the topic plus a SQL mirror that the trainer writes
ExperienceStorage = Literal["kafka", "queue", "sql"]
PromptType = Literal["plaintext", "messages"]
SyncMethod = Literal["checkpoint"]
SyncTimeoutAction = Literal["wait", "stop"]
TrainerStrategy = Literal["fsdp2"]
Implementation = Literal["rft", "verl"]
ClusterDevice = Literal["auto", "cpu"]

_RAY = (
    "not read: Ray only places rft's processes (cluster.launcher: ray, namespace rft.<project>.<name>); "
    "coordination runs over Kafka"
)
_VERL = "settings of the veRL backend; rft's torch trainer does not read them"


@dataclass
class AlgorithmConfig:
    """`algorithm`: the RL algorithm and its pluggable parts (names looked up in registries).

    Parts left unset (None) come from the preset of `algorithm_type` when the algorithm is resolved
    (rft.algorithms.presets.resolve_algorithm), which also checks names and repeat_times.
    """

    algorithm_type: str = "grpo"
    repeat_times: int = bounded(1, ge=1)
    advantage_fn: str | None = None
    advantage_fn_args: dict[str, Any] = field(default_factory=dict)
    policy_loss_fn: str | None = None
    policy_loss_fn_args: dict[str, Any] = field(default_factory=dict)
    kl_penalty_fn: str | None = None
    kl_penalty_fn_args: dict[str, Any] = field(default_factory=dict)
    kl_loss_fn: str | None = None
    kl_loss_fn_args: dict[str, Any] = field(default_factory=dict)  # e.g. kl_coef
    entropy_loss_fn: str | None = None
    entropy_loss_fn_args: dict[str, Any] = field(default_factory=dict)  # e.g. entropy_coef
    loss_agg_mode: str = "token-mean"  # a name in rft.algorithms.aggregation.LOSS_AGG_MODES
    # a name in rft.buffer.sample_strategy.SAMPLE_STRATEGIES (default, staleness_control, mix)
    sample_strategy: str | None = None
    # its args: max_staleness, expert_data_ratio, sft_dataset_name, filter_groups
    sample_strategy_args: dict[str, Any] = field(default_factory=dict)
    # rft: whose functions compute the advantages and policy loss: rft's, or verl's core_algos
    # (the `verl/<name>` parts, same args; needs verl installed)
    implementation: Implementation = "rft"

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "use_critic": "rft has no critic model",
        "add_strategy": "experiences are written to Kafka as they are made",
    }


@dataclass
class ModelConfig:
    """`model`: the policy model and its token limits."""

    model_path: str  # "smollm2" (bundled GGUF), "tiny" (random init) or a local model directory
    max_prompt_tokens: int = bounded(1024, ge=1)
    max_response_tokens: int = bounded(1024, ge=1)
    max_model_len: int | None = bounded(None, ge=2)  # default: max_prompt + max_response tokens
    min_response_tokens: int = bounded(1, ge=0)
    enable_prompt_truncation: bool = True
    repetition_penalty: float = bounded(1.0, gt=0)
    custom_chat_template: str | None = None
    chat_template_path: str | None = None
    dtype: DType = "float32"  # rft: dtype of the trained weights (float32 on CPU)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "critic_model_path": "rft has no critic model",
        "lora_configs": "LoRA is not supported yet; the full model is trained",
        "rope_scaling": "the model's own config decides RoPE",
        "rope_theta": "the model's own config decides RoPE",
        "tinker": "the Tinker service is not supported",
    }


@dataclass
class ClusterConfig:
    """`cluster`: nodes and GPUs, and how `rft run` places its processes on them.

    `launcher` names a part of `rft.supervisor.launchers.LAUNCHERS`: `local` starts the explorer
    and the trainer as processes on this machine; `ray` starts them as Ray actors in a placement
    group sized from node_num × gpu_per_node (`rft.supervisor.ray_placement`). `device: cpu`
    computes on the CPU whatever gpu_per_node says: the GPUs are then only declared to Ray.
    """

    node_num: int = bounded(1, ge=1)
    gpu_per_node: int = bounded(0, ge=0)
    launcher: str = "local"
    device: ClusterDevice = "auto"  # auto: GPUs when gpu_per_node > 0, else the CPU


@dataclass
class FormatConfig:
    """`format` of a taskset: which raw-row fields hold the prompt, answer, system prompt..."""

    prompt_type: PromptType = "plaintext"
    prompt_key: str = "prompt"
    response_key: str = "response"
    system_prompt: str | None = None
    system_prompt_key: str | None = None
    messages_key: str = "message"
    reply_prefix: str | None = None
    chat_template: str | None = None

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "tools_key": "no rft workflow offers tools yet; tool definitions in rows are not read",
        "chosen_key": "DPO is not built yet; preference pairs are not read",
        "rejected_key": "DPO is not built yet; preference pairs are not read",
        "enable_concatenated_multi_turn": "rft's workflows are single-turn; no turns are joined",
    }

    def as_task_format(self) -> dict[str, str]:
        """The string map carried by Task events (unset entries left out)."""
        return {k: str(v) for k, v in asdict(self).items() if v is not None}


@dataclass
class RolloutArgs:
    """`rollout_args` of a taskset: sampling settings for its tasks."""

    temperature: float = bounded(1.0, ge=0)
    top_p: float = bounded(1.0, gt=0, le=1)
    top_k: int = bounded(-1, ge=-1)  # -1: no top-k filtering
    max_tokens: int | None = bounded(None, ge=1)  # default: model.max_response_tokens
    logprobs: int = bounded(0, ge=0)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TaskSelectorConfig:
    """`task_selector` of a taskset: which rows become tasks, in what order.

    `selector_type` names a part of `producers.task_selectors` (Trinity-RFT's names): offline
    ones (sequential, shuffle, random, offline_easy2hard) order each epoch in the publisher; the
    online difficulty_based chooses batch by batch from observed rewards in the task feeder.
    `feature_keys` names numeric row columns the selector reads (offline_easy2hard sorts by
    them; difficulty_based takes the first as a prior pass rate); `kwargs` are its arguments.
    """

    selector_type: str = "sequential"
    feature_keys: list[str] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class TasksetConfig:
    """One taskset (`buffer.explorer_input.taskset` or an entry of `eval_tasksets`)."""

    name: str
    path: str  # a file/directory for storage_type file; the generator name for generator
    storage_type: TasksetStorage = "file"
    split: str = "train"
    subset_name: str | None = None
    format: FormatConfig = field(default_factory=FormatConfig)
    rollout_args: RolloutArgs = field(default_factory=RolloutArgs)
    repeat_times: int | None = bounded(None, ge=1)  # default: algorithm.repeat_times, 1 for eval
    default_workflow_type: str | None = None  # default: explorer_input's default
    default_reward_fn_type: str | None = None  # default: explorer_input's default
    workflow_args: dict[str, Any] = field(default_factory=dict)
    reward_fn_args: dict[str, Any] = field(default_factory=dict)
    generator_args: dict[str, Any] = field(default_factory=dict)  # for storage_type generator
    task_selector: TaskSelectorConfig = field(default_factory=TaskSelectorConfig)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "enable_progress_bar": "`rft publish` shows a progress bar on a terminal, whatever this says",
        "index": "the task stream position lives in Kafka consumer offsets",
    }


@dataclass
class ExplorerInputConfig:
    """`buffer.explorer_input`: the tasksets explorers read."""

    taskset: TasksetConfig | None = None
    eval_tasksets: list[TasksetConfig] = field(default_factory=list)
    default_workflow_type: str | None = None
    default_eval_workflow_type: str | None = None  # default: default_workflow_type
    default_reward_fn_type: str | None = None


@dataclass
class ReplayBufferConfig:
    """`replay_buffer` of the experience buffer: the trainer reuses experiences by priority.

    With `enable`, complete rollout groups wait in a buffer of `experience_buffer.capacity`
    experiences and are trained highest `priority_fn` first (a name in
    rft.buffer.priority_fns.PRIORITY_FNS: linear_decay, linear_decay_use_count_control_randomization,
    with `priority_fn_args`); a trained group may be trained again `reuse_cooldown_time` seconds
    later (None: each group is trained once). Use counts survive a trainer restart
    (rft.buffer.replay_buffer).
    """

    enable: bool = False
    reuse_cooldown_time: float | None = bounded(None, ge=0)
    priority_fn: str = "linear_decay"
    priority_fn_args: dict[str, Any] = field(default_factory=dict)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "capacity": "the replay capacity is buffer.trainer_input.experience_buffer.capacity; "
        "this one has no effect",
    }


@dataclass
class ExperienceBufferConfig:
    """`buffer.trainer_input.experience_buffer`: where experiences flow (always a Kafka topic).

    `path` is a topic name for storage_type kafka (default: the run's `experiences` topic). For
    Trinity-RFT's `queue` and `sql` it is a SQLAlchemy URL, never a topic: experiences still flow
    through the run's topic, and with `sql` the trainer also mirrors each one it reads into the
    table `name` of that database (default: a SQLite file in the run's job directory;
    `consumers.experience_mirror`).
    """

    name: str = "experience_buffer"
    storage_type: ExperienceStorage = "kafka"
    path: str | None = None
    max_read_timeout: float = bounded(1800.0, gt=0)  # seconds to wait for a full batch
    # experiences the replay buffer holds (whole groups; the lowest priority is evicted); without
    # replay the backlog waits in Kafka and this has no effect
    capacity: int = bounded(10000, ge=1)
    replay_buffer: ReplayBufferConfig = field(default_factory=ReplayBufferConfig)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "format": "experiences are events with a fixed schema",
    }

    @property
    def topic(self) -> str | None:
        """The topic named by this section, or None for the run's own experience topic."""
        return self.path if self.storage_type == "kafka" else None


@dataclass
class AuxiliaryBufferConfig:
    """An entry of `buffer.trainer_input.auxiliary_buffers`: demonstrations for `sample_strategy:
    mix`, read as supervised prompt/response rows (rft.buffer.expert_source).

    storage_type `file`: `path` is a JSONL / JSON / Parquet / Arrow file or a local Hugging Face
    dataset directory (with `split` / `subset_name`), its columns named by `format`. `kafka`
    (alias `queue`): `path` is a topic of Experience events.
    """

    path: str
    name: str = ""  # default: its key under auxiliary_buffers
    storage_type: Literal["file", "kafka", "queue"] = "file"
    split: str = "train"
    subset_name: str | None = None
    format: FormatConfig = field(default_factory=FormatConfig)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "schema_type": "auxiliary buffers are always read as SFT prompt/response rows",
        "max_read_timeout": "a file is always ready; a topic is polled without a deadline",
        "replay_buffer": "demonstrations are not replayed by priority; files repeat by epoch",
        "capacity": "demonstrations are read as they are needed",
        "enable_progress_bar": "the trainer reads auxiliary buffers without a progress bar",
        "index": "the position in an auxiliary buffer is saved with each weight version",
        "total_epochs": "a file is read again from its start when it runs out",
    }


@dataclass
class TrainerInputConfig:
    """`buffer.trainer_input`: what the trainer reads and how stale it may be."""

    experience_buffer: ExperienceBufferConfig = field(default_factory=ExperienceBufferConfig)
    # rft's older key, an alias of algorithm.sample_strategy_args.max_staleness: an experience
    # made by model version v is dropped (and counted) when its batch would train at version
    # > v + max_staleness; None accepts any age, 0 accepts only the current version. Set with
    # sample_strategy default, it selects staleness_control.
    max_staleness: int | None = bounded(None, ge=0)
    auxiliary_buffers: dict[str, AuxiliaryBufferConfig] = field(default_factory=dict)


@dataclass
class BufferConfig:
    """`buffer`: batch sizes, epochs and the explorer/trainer inputs."""

    # tasks per explorer step (not multiplied by repeat_times); default: train_batch_size /
    # repeat_times, so Trinity's trainer-only configs that give only train_batch_size load
    batch_size: int | None = bounded(None, ge=1)
    train_batch_size: int | None = bounded(None, ge=1)  # default: batch_size * repeat_times
    total_epochs: int = bounded(1, ge=1)
    total_steps: int | None = bounded(None, ge=1)  # when set, total_epochs has no effect
    explorer_input: ExplorerInputConfig = field(default_factory=ExplorerInputConfig)
    trainer_input: TrainerInputConfig = field(default_factory=TrainerInputConfig)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "max_retry_times": "retries of a failed rollout follow explorer.max_retry_times",
        "max_retry_interval": "Kafka clients retry on their own schedule",
    }


@dataclass
class RolloutModelConfig:
    """`explorer.rollout_model`: the rollout engine."""

    engine_type: str = "hf"  # a name in rft.engines.rollout.ROLLOUT_ENGINES
    engine_num: int = bounded(1, ge=1)
    tensor_parallel_size: int = bounded(1, ge=1)
    seed: int = 42
    dtype: DType | None = None  # default: model.dtype
    enable_thinking: bool | None = None  # passed to chat templates that support it
    # vllm: the share of GPU memory the engine takes (weights, KV cache, graphs)
    gpu_memory_utilization: float = bounded(0.9, gt=0, le=1)
    # no CUDA graphs: vllm runs eagerly, hf skips its static-cache + torch.compile path on a GPU
    enforce_eager: bool = False
    enable_prefix_caching: bool = True  # vllm: reuse KV blocks of shared prompt prefixes
    # default: model.max_model_len, the one bound for rollouts and training (a different value
    # is refused at load)
    max_model_len: int | None = bounded(None, ge=2)
    # the engine's own settings: the keys its ROLLOUT_ENGINES entry reads (`args`); others are
    # refused at load
    engine_args: dict[str, Any] = field(default_factory=dict)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "enable_history": "workflows return their experiences explicitly",
        "enable_openai_api": "rft serves no OpenAI-compatible endpoint from its engines",
        "base_url": "read only by an OpenAI-compatible rollout engine, which rft does not have yet",
        "api_key": "read only by an OpenAI-compatible rollout engine, which rft does not have yet",
        "enable_chunked_prefill": "vllm 0.26 always chunks long prefills; the hf engine does not",
        "use_v1": "vllm 0.26 has only its V1 engine",
    }
    VALUE_ALIASES: ClassVar[dict[str, dict[str, Alias]]] = {
        "engine_type": {"vllm_async": Alias("vllm")},
    }


@dataclass
class ExplorerConfig:
    """`explorer`: rollout workers (one consumer-group member each) and evaluation."""

    name: str = "explorer"
    runner_per_model: int = bounded(8, ge=1)  # tasks in one batched engine call
    runner_num: int | None = bounded(None, ge=1)  # default: engine_num * runner_per_model
    max_timeout: float = bounded(900.0, gt=0)  # seconds a workflow may run
    max_retry_times: int = bounded(2, ge=0)
    env_vars: dict[str, str] = field(default_factory=dict)
    rollout_model: RolloutModelConfig = field(default_factory=RolloutModelConfig)
    eval_interval: int = bounded(100, ge=1)
    eval_on_startup: bool = True
    bench_on_latest_checkpoint: bool = False  # mode bench: only the newest version, not each one
    # where a new explorer group first reads tasks: earliest, latest, or a timestamp (ISO-8601
    # or ms since the epoch); a group with committed offsets resumes from them
    tasks_from: str = "earliest"
    # where this group's experiences go: `trainer` (the trainer's topic), `own` (a topic of its
    # own, <project>.<name>.experiences.<explorer.name>, that the trainer never reads), or a
    # topic name
    experiences_to: str = "trainer"
    # explorer processes this group is sized for: the tasks topic gets at least this many
    # partitions (default: rollout_model.engine_num, the ray launcher's explorers)
    max_explorers: int | None = bounded(None, ge=1)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "auxiliary_models": "auxiliary models are not supported yet",
        "over_rollout": "explorers commit each task as it finishes; no batch waits to trim",
        "dynamic_timeout": "timeouts are fixed by max_timeout",
        "runner_state_report_interval": "runner state is reported through metrics",
        "service_status_check_interval": _RAY,
    }


@dataclass
class OptimizerConfig:
    """`trainer.optim` (also read from Trinity-RFT's `algorithm.optimizer`): AdamW settings."""

    lr: float = bounded(1e-6, gt=0)
    betas: list[float] = bounded([0.9, 0.999], ge=0, lt=1)
    weight_decay: float = bounded(0.01, ge=0)
    lr_warmup_steps: int = bounded(0, ge=0)
    lr_warmup_steps_ratio: float = bounded(0.0, ge=0, le=1)  # used when lr_warmup_steps is 0
    warmup_style: str = "constant"  # a name in rft.engines.trainer.LR_SCHEDULES
    min_lr_ratio: float = bounded(0.0, ge=0, le=1)  # floor of the cosine/linear schedule

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "total_training_steps": "derived from buffer.total_steps / total_epochs",
        "optimizer_type": "rft's torch trainer uses AdamW",
    }


@dataclass
class TrainerConfig:
    """`trainer`: the trainer engine, checkpointing and optimisation."""

    name: str = "trainer"
    # a name in rft.engines.trainer.TRAINER_ENGINES: torch (one process) or fsdp2 (N ranks)
    trainer_type: str = "torch"
    # Trinity's sharding strategy: fsdp2 (and fsdp, read as fsdp2) shards the torch engine
    trainer_strategy: TrainerStrategy | None = None
    # ranks of the fsdp2 engine; default: the GPUs left after rollout on GPUs, 1 on the CPU
    world_size: int | None = bounded(None, ge=1)
    save_interval: int = bounded(100, ge=1)  # steps between checkpoints in the object store
    grad_clip: float = bounded(1.0, gt=0)
    total_steps: int | None = bounded(None, ge=1)  # default: buffer.total_steps
    micro_batch_size: int = bounded(4, ge=1)  # experiences per forward pass on one device
    max_checkpoints_to_keep: int | None = bounded(None, ge=1)  # older ones pruned; None keeps all
    optim: OptimizerConfig = field(default_factory=OptimizerConfig)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "save_strategy": "one trainer process writes each checkpoint",
        "save_hf_checkpoint": "checkpoints are always saved as safetensors with a manifest",
        "use_dynamic_bsz": _VERL,
        "max_token_len_per_gpu": _VERL,
        "ppo_max_token_len_per_gpu": _VERL,
        "ulysses_sequence_parallel_size": "sequence parallelism is not supported",
        "trainer_config": _VERL,
        "trainer_config_path": _VERL,
        "actor_grad_clip": "use trainer.grad_clip",
    }
    VALUE_ALIASES: ClassVar[dict[str, dict[str, Alias]]] = {
        "trainer_type": {
            "verl": Alias(
                "fsdp2",
                "rft has no veRL workers: rft's FSDP2 engine (torch fully_shard over "
                "trainer.world_size ranks) trains instead, and verl's advantage and loss "
                "functions are selected with algorithm.implementation: verl",
            ),
        },
        "trainer_strategy": {
            "fsdp": Alias(
                "fsdp2", "rft shards with FSDP2 (torch fully_shard); the training math is the same"
            ),
        },
    }
    REFUSED_VALUES: ClassVar[dict[str, dict[str, str]]] = {
        "trainer_strategy": {"megatron": "rft has no Megatron engine; use fsdp2"},
    }

    @property
    def engine_name(self) -> str:
        """The TRAINER_ENGINES entry this section selects. Once loaded, `trainer_type`: the load
        (rft.catalog) hands it over to the engine its entry names for `trainer_strategy`
        (`sharded_by`: the torch engine, sharded with fsdp2, is the fsdp2 engine)."""
        return self.trainer_type


@dataclass
class SynchronizerConfig:
    """`synchronizer`: when explorers load new weights and how they receive them."""

    sync_method: SyncMethod = "checkpoint"
    sync_style: str = "fixed"  # a name in rft.synchronizer.SYNC_STYLES
    sync_interval: int = bounded(1, ge=1)  # trainer steps between weight versions
    sync_offset: int = bounded(0, ge=0)  # explorer steps taken before the trainer starts
    sync_timeout: float = bounded(1200.0, gt=0)  # seconds
    # rft: what an explorer does when a version it needs has not arrived within sync_timeout:
    # "wait" (warn, count it in the sync_timeouts_total metric, keep waiting) or "stop" (fail with
    # the reason). It never rolls out on older weights than its style allows.
    on_sync_timeout: SyncTimeoutAction = "wait"
    # AReaL's η: explorer step s waits until it holds version >= s - 1 - η, so no rollout starts
    # more than η versions ahead of the newest weights (None: no bound). Applies to every style.
    max_head_offpolicyness: int | None = bounded(None, ge=0)

    VALUE_ALIASES: ClassVar[dict[str, dict[str, Alias]]] = {
        "sync_style": {
            "explorer_driven": Alias("dynamic_by_explorer"),
            "dynamic_by_trainer": Alias("trainer_driven"),
        },
        "sync_method": {
            name: Alias(
                "checkpoint",
                "weights reach explorers as verified checkpoint versions through the object "
                "store, announced on the weights topic",
            )
            for name in ("nccl", "memory")
        },
    }


@dataclass
class MonitorConfig:
    """`monitor`: the sinks that metrics from the `metrics` topic are written to.

    `monitor_type` names sinks of `consumers.metric_sinks.METRIC_SINKS` (one name or a list);
    `monitor_args` holds their settings, per sink (`{tensorboard: {log_dir: ...}}`) or, with one
    sink, flat. `consumers.metric_sinks.check_sinks` checks both. `trace_exporter`, `trace_args`
    and `trace_content` set the OpenTelemetry spans of every process (`rft.tracing.setup`).
    """

    monitor_type: list[str] = field(default_factory=lambda: ["console"])
    monitor_args: dict[str, Any] = field(default_factory=dict)
    # rft: where each process's spans go (rft.tracing.setup.SPAN_EXPORTERS: none, console, file,
    # otlp); the default comes from RFT_TRACE_EXPORTER, else none (nothing is sent anywhere)
    trace_exporter: str = field(
        default_factory=lambda: os.environ.get("RFT_TRACE_EXPORTER", "none")
    )
    trace_args: dict[str, Any] = field(default_factory=dict)  # rft: the exporter's settings
    trace_content: bool = False  # rft: prompt and response text in spans (off: ids and sizes)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "enable_ray_timeline": _RAY,
    }


@dataclass
class RftConfig:
    """A whole run: the top-level keys and one dataclass per section."""

    project: str
    name: str
    model: ModelConfig
    buffer: BufferConfig
    mode: Mode = "both"
    checkpoint_root_dir: str = "./checkpoints"  # local logs and monitor output of the run
    continue_from_checkpoint: bool = True
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    explorer: ExplorerConfig = field(default_factory=ExplorerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    synchronizer: SynchronizerConfig = field(default_factory=SynchronizerConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    stack: StackSettings = field(default_factory=StackSettings)  # rft: Kafka and object store
    # rft: modules (dotted names or .py files) imported before the config's names are checked, so
    # parts they register (`@WORKFLOWS.register(...)`) can be selected; RFT_PLUGINS adds more
    plugins: list[str] = field(default_factory=list)

    REFUSED_VALUES: ClassVar[dict[str, dict[str, str]]] = {
        "mode": {
            "serve": "rft has no serving mode; load a checkpoint version with any inference "
            "server, or run mode 'bench' to evaluate versions",
        }
    }
    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "ray_namespace": _RAY,
        "service": "the Data-Juicer service is not supported",
        "data_processor": "task/experience pipelines are not supported yet",
        "log": "rft logs through Python logging; set the level with RFT_LOG_LEVEL",
        "stages": "multi-stage runs are not supported yet; run one config per stage",
        "actor_rollout_ref": _VERL,
        "critic": _VERL,
        "hf_checkpoint_dir": "checkpoints live in the object store",
    }

    @property
    def job_dir(self) -> Path:
        """Local directory of this run: `<checkpoint_root_dir>/<project>/<name>`."""
        return Path(self.checkpoint_root_dir) / self.project / self.name

    def to_dict(self, include_secrets: bool = False) -> dict[str, Any]:
        """Plain data (paths as strings). Secrets are left out unless asked for."""
        fields = _plain(asdict(self))
        data = {key: fields[key] for key in _TOP_LEVEL_ORDER}
        if not include_secrets:
            data["stack"]["object_store"].pop("access_key", None)
            data["stack"]["object_store"].pop("secret_key", None)
        return data

    def to_yaml(self, include_secrets: bool = False) -> str:
        """YAML that `load_config` reads back into an equal config.

        Secrets are left out unless asked for; loading then takes them from the environment again.
        """
        return yaml.dump(
            self.to_dict(include_secrets=include_secrets),
            Dumper=_ConfigDumper,
            sort_keys=False,
            allow_unicode=True,
        )


_INTERPOLATION_START = re.compile(r"(\\*)\$\{")

_TOP_LEVEL_ORDER = (
    "project",
    "name",
    "mode",
    "checkpoint_root_dir",
    "continue_from_checkpoint",
    "algorithm",
    "model",
    "cluster",
    "buffer",
    "explorer",
    "trainer",
    "synchronizer",
    "monitor",
    "stack",
    "plugins",
)


_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~", ""}


class _ConfigDumper(yaml.SafeDumper):
    """Quotes every string that a YAML loader might read as a number, bool or null.

    OmegaConf's loader reads more forms as floats than PyYAML's dumper expects (`0E0`, `1e5`), so
    plain output of such strings would come back as numbers.
    """


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    ambiguous = value.strip().lower() in _YAML_WORDS or value[:1] in set("-+.0123456789")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="'" if ambiguous else None)


_ConfigDumper.add_representer(str, _represent_str)


def _plain(value: Any) -> Any:
    if isinstance(value, str) and "${" in value:
        # Written text, not an interpolation, when read back: `\${` is a literal `${`, and
        # backslashes right before it are doubled so they stay backslashes.
        return _INTERPOLATION_START.sub(lambda m: m.group(1) * 2 + "\\${", value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value
