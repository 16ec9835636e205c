"""The typed run config: one dataclass per section, with Trinity-RFT key names and meanings.

Values are checked once by the loader (types, bounds, allowed values, and every name that selects a
registered part against its registry: `rft.catalog.parts`) and derived defaults are filled there; the
rest of rft trusts these objects. Trinity-RFT keys that do not apply to rft are listed in each
section's IGNORED_KEYS: a carried-over YAML loads, with a warning per such key saying what happens
instead. Each field declares its fate with `key(...)` (`rft.config.fate`): what it does, the code that
acts on it and the test that shows it; the reference page docs/configuration.md is generated from it.
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
from rft.config.fate import fate, key

Mode = Literal["both", "explore", "train", "bench", "serve"]
DType = Literal["float32", "bfloat16", "float16", "auto"]
TasksetStorage = Literal["file", "generator"]
# kafka/queue: the Kafka topic; sql: the topic plus a SQL mirror that the trainer writes
ExperienceStorage = Literal["kafka", "queue", "sql", "file"]
PromptType = Literal["plaintext", "messages"]
SyncTimeoutAction = Literal["wait", "stop"]
TrainerStrategy = Literal["fsdp2"]
Implementation = Literal["rft", "verl"]
ClusterDevice = Literal["auto", "cpu"]

_RAY = (
    "not read: Ray only places rft's processes (cluster.launcher: ray, namespace rft.<project>.<name>); "
    "coordination runs over Kafka"
)
_VERL = "settings of the veRL backend; rft's torch trainer does not read them"
# where keys are acted on (each field's `key(acts_in=...)`)
_PLAN = "consumers/run_plan.py"
_DERIVED = "rft/config/derived.py"
_ROLLOUT_CHECKS = "rft/engines/rollout_checks.py"
_EXPLORER = "consumers/explorer/explorer.py"
_SERVE = "consumers/serve/core.py"
_SERVE_TEST = "tests/integration/test_serve.py"
_EXPLORER_SYNC = "consumers/explorer/sync.py"
_TRAINER = "consumers/trainer/trainer.py"
_PRESETS = "rft/algorithms/presets.py"
_SINKS = "consumers/metrics/sinks.py"
_WORKFLOW = "rft/workflows/workflow.py"
_READER = "producers/taskset_reader.py"
_STRATEGY = "rft/buffer/sample_strategy.py"
_DATASET_PUBLISHER = "producers/dataset_publisher.py"
_REPLAY = "rft/buffer/replay_buffer.py"
_EXPERT = "rft/buffer/expert_source.py"
_PIPELINE = "rft/buffer/experience_pipeline.py"


@dataclass
class AlgorithmConfig:
    """`algorithm`: the RL algorithm and its pluggable parts (names looked up in registries).

    Parts left unset (None) come from the preset of `algorithm_type` when the algorithm is resolved
    (rft.algorithms.presets.resolve_algorithm), which also checks names and repeat_times.
    """

    algorithm_type: str = key(
        "grpo",
        does="the preset of parts (ALGORITHM_TYPES)",
        acts_in=_PRESETS,
        shown_by="tests/unit/test_config_parts.py",
    )
    repeat_times: int = key(
        bounded(1, ge=1),
        does="rollouts per task (the group size)",
        acts_in=_READER,
        shown_by="tests/integration/test_rft_loop.py",
    )
    advantage_fn: str | None = key(
        None,
        does="ADVANTAGE_FN part",
        acts_in=_PRESETS,
        shown_by="tests/unit/test_registry.py",
    )
    advantage_fn_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="keyword args of the advantage fn, checked against its signature",
        acts_in=_PRESETS,
        shown_by="tests/unit/test_registry.py",
    )
    policy_loss_fn: str | None = key(
        None,
        does="POLICY_LOSS_FN part",
        acts_in=_PRESETS,
        shown_by="tests/unit/test_registry.py",
    )
    policy_loss_fn_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="keyword args of the policy loss (clip ranges, loss_agg_mode)",
        acts_in=_PRESETS,
        shown_by="tests/unit/test_losses.py",
    )
    kl_penalty_fn: str | None = key(
        None,
        does="KL estimator folded into rewards before advantages",
        acts_in=_PRESETS,
        shown_by="tests/unit/test_trainer_kl_penalty.py",
    )
    kl_penalty_fn_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="kl_coef of the reward penalty",
        acts_in=_PRESETS,
        shown_by="tests/unit/test_trainer_kl_penalty.py",
    )
    kl_loss_fn: str | None = key(
        None,
        does="KL_FN loss term against the base model",
        acts_in=_PRESETS,
        shown_by="tests/unit/test_trainer_kl_penalty.py",
    )
    kl_loss_fn_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="args of the KL loss, e.g. kl_coef",
        acts_in=_PRESETS,
        shown_by="tests/unit/test_losses.py",
    )
    entropy_loss_fn: str | None = key(
        None,
        does="ENTROPY_LOSS_FN term",
        acts_in=_PRESETS,
        shown_by="tests/integration/test_rft_loop.py",
    )
    entropy_loss_fn_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="args of the entropy term, e.g. entropy_coef",
        acts_in=_PRESETS,
        shown_by="tests/unit/test_losses.py",
    )
    loss_agg_mode: str = key(
        "token-mean",
        does="a name in LOSS_AGG_MODES (rft.algorithms.aggregation): how token losses become the batch loss",
        acts_in=_PRESETS,
        shown_by="tests/unit/test_losses.py",
    )
    sample_strategy: str | None = key(
        None,
        does="a name in SAMPLE_STRATEGIES (rft.buffer.sample_strategy: default, staleness_control, mix): how the trainer forms batches",
        acts_in=_STRATEGY,
        shown_by="tests/unit/test_samplers.py",
    )
    sample_strategy_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="the strategy's args (max_staleness, expert_data_ratio, sft_dataset_name, filter_groups), checked at load",
        acts_in=_STRATEGY,
        shown_by="tests/unit/test_samplers.py",
    )
    implementation: Implementation = key(
        "rft",
        does="whose functions compute the advantages and policy loss: rft's, or (verl) verl's core_algos, the `verl/<name>` parts with the same args; needs verl installed",
        acts_in=_PRESETS,
        shown_by="tests/unit/test_verl_differential.py",
    )

    use_critic: bool | None = key(
        None,
        does="train a critic (a value model) beside the policy; it must agree with the advantage fn: true only with one that reads values (ppo / gae), false refuses them; unset follows the advantage fn",
        acts_in=_PRESETS,
        shown_by="tests/unit/test_ppo_critic.py",
    )

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "add_strategy": "experiences are written to Kafka as they are made",
    }


_LORA_TEST = "tests/unit/test_lora.py"


@dataclass
class LoraAdapterConfig:
    """An entry of `model.lora_configs`: the LoRA adapter the trainer trains instead of the full
    model (one per run). Each weight version then carries the adapter only, and explorers apply
    it to the base model they loaded (rft.engines.lora)."""

    name: str | None = key(
        None,
        does="the adapter's name: vLLM's lora_name, and the manifest's (default: policy)",
        acts_in=_TRAINER,
        shown_by=_LORA_TEST,
    )
    lora_rank: int = key(
        bounded(32, ge=1),
        does="rank r of the adapter's A (r × in) and B (out × r) matrices",
        acts_in=_TRAINER,
        shown_by=_LORA_TEST,
    )
    lora_alpha: int = key(
        bounded(32, ge=1),
        does="scale α: a layer computes W·x + (α / r)·B·A·x",
        acts_in=_TRAINER,
        shown_by=_LORA_TEST,
    )
    target_modules: list[str] = key(
        field(default_factory=lambda: ["all-linear"]),
        does="modules that get an adapter: all-linear (every linear layer but the output head) or module names (q_proj, v_proj, ...)",
        acts_in=_TRAINER,
        shown_by=_LORA_TEST,
    )
    exclude_modules: list[str] = key(
        field(default_factory=list),
        does="module names left without an adapter among target_modules",
        acts_in=_TRAINER,
        shown_by=_LORA_TEST,
    )
    base_model_name: str | None = key(
        None,
        does="the base's name recorded in each adapter version's manifest (default: model.model_path); the base itself is identified by its weights' fingerprint, checked by every loader",
        acts_in=_TRAINER,
        shown_by=_LORA_TEST,
    )
    lora_dtype: Literal["auto"] = key(
        "auto",
        does="auto only: the adapter trains in the trainer's master dtype and is published in the rollout dtype, like full weights",
        acts_in="rft/config/schema.py",
        shown_by=_LORA_TEST,
    )
    lora_dropout: float = key(
        bounded(0.0, ge=0, le=0),
        does="0 only: the trainer's forward runs without dropout so its logprobs are the rollout's",
        acts_in="rft/config/schema.py",
        shown_by=_LORA_TEST,
    )
    path: str | None = key(
        None,
        does="refused when set: an adapter starts from zero (B = 0) at version 0, the base model",
        acts_in=_DERIVED,
        shown_by=_LORA_TEST,
    )

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "is_dummy": "Trinity sets it itself; rft has no dummy adapters",
    }


@dataclass
class ModelConfig:
    """`model`: the policy model and its token limits."""

    model_path: str = field(
        metadata=fate(
            "smollm2 (bundled GGUF), tiny, qwen2.5-1.5b-shape (random weights, Qwen2.5-1.5B's shape: throughput only), or a local HF directory",
            "rft/engines/models.py",
            "tests/integration/test_rft_loop.py",
        )
    )
    max_prompt_tokens: int = key(
        bounded(1024, ge=1),
        does="longer prompts are truncated (last tokens kept) or refused; a multi-turn turn "
        "over it ends its trajectory, marked truncated",
        acts_in="rft/engines/prompt_limits.py",
        shown_by="tests/unit/test_prompt_limits.py",
    )
    max_response_tokens: int = key(
        bounded(1024, ge=1),
        does="default and bound of rollout max_tokens",
        acts_in=_EXPLORER,
        shown_by="tests/unit/test_explorer_settings.py",
    )
    max_model_len: int | None = key(
        bounded(None, ge=2),
        does="prompt + response tokens are clamped to it, each turn of a multi-turn rollout too "
        "(default: max_prompt_tokens + max_response_tokens)",
        acts_in="rft/engines/prompt_limits.py",
        shown_by="tests/unit/test_prompt_limits.py",
    )
    min_response_tokens: int = key(
        bounded(1, ge=0),
        does="no eos before this many tokens",
        acts_in=_EXPLORER,
        shown_by="tests/unit/test_explorer_settings.py",
    )
    enable_prompt_truncation: bool = key(
        True,
        does="truncate (true) or refuse (false) over-long prompts",
        acts_in="rft/engines/prompt_limits.py",
        shown_by="tests/unit/test_explorer_settings.py",
    )
    repetition_penalty: float = key(
        bounded(1.0, gt=0),
        does="applied to sampling; logprobs stay those of the raw distribution",
        acts_in="rft/engines/rollout.py",
        shown_by="tests/unit/test_engines_rollout.py",
    )
    custom_chat_template: str | None = key(
        None,
        does="Jinja template replacing the tokenizer's",
        acts_in="rft/engines/chat_template.py",
        shown_by="tests/unit/test_explorer_settings.py",
    )
    chat_template_path: str | None = key(
        None,
        does="file holding that template",
        acts_in="rft/engines/chat_template.py",
        shown_by="tests/unit/test_explorer_settings.py",
    )
    dtype: DType = key(
        "float32",
        does="the trained weights' dtype; auto = bf16 on a GPU (fp32 master weights), fp32 on the CPU",
        acts_in=_PLAN,
        shown_by="tests/unit/test_run_plan.py",
    )

    critic_model_path: str | None = key(
        None,
        does="the critic's model (smollm2, tiny, or a local HF directory), a value head on its decoder; default: model_path. Read only when a critic is trained (algorithm.use_critic)",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_ppo_critic.py",
    )

    lora_configs: list[LoraAdapterConfig] = key(
        field(default_factory=list),
        does="one entry: train a LoRA adapter instead of the full model; versions carry the adapter, explorers apply it to the base (hf: peft on the model, vllm: a LoRARequest per version); torch trainer engine only",
        acts_in=_TRAINER,
        shown_by="tests/integration/test_lora_run.py",
    )

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "fully_sharded_loras": "vLLM setting for tensor-parallel LoRA; rft's vllm engine runs the adapter unsharded",
        "max_cpu_loras": "an explorer holds one adapter: the newest version's",
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

    node_num: int = key(
        bounded(1, ge=1),
        does="launcher ray: node_num × gpu_per_node GPUs size the placement group; launcher local: more than 1 warns that it starts processes on this machine only",
        acts_in="rft/supervisor/ray_placement.py",
        shown_by="tests/unit/test_ray_placement.py",
    )
    gpu_per_node: int = key(
        bounded(0, ge=0),
        does="GPU placement: rollout on the first GPUs, trainer on the next",
        acts_in=_PLAN,
        shown_by="tests/unit/test_run_plan.py",
    )
    launcher: str = key(
        "local",
        does="LAUNCHERS part that starts the processes of `rft run`: local processes or Ray actors",
        acts_in="rft/supervisor/launchers.py",
        shown_by="tests/integration/test_ray_launcher.py",
    )
    device: ClusterDevice = key(
        "auto",
        does="auto: GPUs when gpu_per_node > 0, else the CPU; cpu: every process computes on the CPU, the GPUs only declared (to Ray's placement)",
        acts_in=_PLAN,
        shown_by="tests/unit/test_run_plan.py",
    )


@dataclass
class FormatConfig:
    """`format` of a taskset: which raw-row fields hold the prompt, answer, system prompt..."""

    prompt_type: PromptType = key(
        "plaintext",
        does="plaintext or messages rows",
        acts_in=_WORKFLOW,
        shown_by="tests/unit/test_workflows.py",
    )
    prompt_key: str = key(
        "prompt",
        does="row field of the prompt",
        acts_in=_WORKFLOW,
        shown_by="tests/unit/test_workflows.py",
    )
    response_key: str = key(
        "response",
        does="row field of the answer the reward reads",
        acts_in=_WORKFLOW,
        shown_by="tests/unit/test_workflows.py",
    )
    system_prompt: str | None = key(
        None,
        does="system message",
        acts_in=_WORKFLOW,
        shown_by="tests/unit/test_workflows.py",
    )
    system_prompt_key: str | None = key(
        None,
        does="row field of the system message",
        acts_in=_WORKFLOW,
        shown_by="tests/unit/test_workflows.py",
    )
    messages_key: str = key(
        "message",
        does="row field of a chat (prompt_type messages)",
        acts_in=_WORKFLOW,
        shown_by="tests/unit/test_workflows.py",
    )
    text_key: str = key(
        "text",
        does="row field of the plain text `algorithm_type: cpt` trains on",
        acts_in="rft/buffer/sft_rows.py",
        shown_by="tests/unit/test_sft_rows.py",
    )
    reply_prefix: str | None = key(
        None,
        does="text the reply is forced to start with",
        acts_in=_WORKFLOW,
        shown_by="tests/unit/test_workflows.py",
    )
    chat_template: str | None = key(
        None,
        does="this taskset's chat template",
        acts_in="rft/workflows/runner.py",
        shown_by="tests/unit/test_step_runner.py",
    )

    tools_key: str | None = key(
        None,
        does="row column listing the tools a tool workflow offers (names or OpenAI specs)",
        acts_in="rft/workflows/environment_workflows.py",
        shown_by="tests/unit/test_tool_workflow.py",
    )
    tool_call_parser: str = key(
        "hermes",
        does="TOOL_CALL_PARSERS: how a tool workflow reads calls in replies, checked at load",
        acts_in="rft/workflows/environment_workflows.py",
        shown_by="tests/unit/test_tool_workflow.py",
    )
    enable_concatenated_multi_turn: bool = key(
        True,
        does="a multi-turn rollout is one experience (off: one per model turn)",
        acts_in="rft/workflows/multi_turn.py",
        shown_by="tests/unit/test_multi_turn_workflow.py",
    )

    chosen_key: str = key(
        "chosen",
        does="row field of a preference pair's chosen response (`algorithm_type: dpo`): a text or a list of messages",
        acts_in="rft/buffer/sft_rows.py",
        shown_by="tests/unit/test_preference_rows.py",
    )
    rejected_key: str = key(
        "rejected",
        does="row field of a preference pair's rejected response (`algorithm_type: dpo`): a text or a list of messages",
        acts_in="rft/buffer/sft_rows.py",
        shown_by="tests/unit/test_preference_rows.py",
    )

    def as_task_format(self) -> dict[str, str]:
        """The string map carried by Task events (unset entries left out)."""
        return {k: str(v) for k, v in asdict(self).items() if v is not None}


@dataclass
class RolloutArgs:
    """`rollout_args` of a taskset: sampling settings for its tasks."""

    temperature: float = key(
        bounded(1.0, ge=0),
        does="sampling temperature; the trainer recomputes logprobs at it",
        acts_in="rft/engines/rollout.py",
        shown_by="tests/unit/test_trainer_temperature.py",
    )
    top_p: float = key(
        bounded(1.0, gt=0, le=1),
        does="nucleus sampling",
        acts_in="rft/engines/rollout.py",
        shown_by="tests/unit/test_engines_rollout.py",
    )
    top_k: int = key(
        bounded(-1, ge=-1),
        does="top-k sampling (-1: no top-k filtering)",
        acts_in="rft/workflows/runner.py",
        shown_by="tests/unit/test_workflows.py",
    )
    max_tokens: int | None = key(
        bounded(None, ge=1),
        does="response length limit (default: model.max_response_tokens)",
        acts_in="rft/engines/prompt_limits.py",
        shown_by="tests/unit/test_prompt_limits.py",
    )
    logprobs: int = key(
        bounded(0, ge=0),
        does="accepted for Trinity; the engine always reports sampled-token logprobs",
        acts_in="rft/workflows/runner.py",
        shown_by="tests/unit/test_workflows.py",
    )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TaskSelectorConfig:
    """`task_selector` of a taskset: which rows become tasks, in what order.

    `selector_type` names a part of `rft.producers.task_selectors` (Trinity-RFT's names): offline
    ones (sequential, shuffle, random, offline_easy2hard) order each epoch in the publisher; the
    online difficulty_based chooses batch by batch from observed rewards in the task feeder.
    `feature_keys` names numeric row columns the selector reads (offline_easy2hard sorts by
    them; difficulty_based takes the first as a prior pass rate); `kwargs` are its arguments.
    """

    selector_type: str = key(
        "sequential",
        does="TASK_SELECTORS: order of tasks per epoch",
        acts_in=_READER,
        shown_by="tests/unit/test_taskset_publisher.py",
    )
    feature_keys: list[str] = key(
        field(default_factory=list),
        does="numeric row columns a selector reads (offline_easy2hard's order, difficulty_based's prior)",
        acts_in=_READER,
        shown_by="tests/unit/test_task_selectors.py",
    )
    kwargs: dict[str, Any] = key(
        field(default_factory=dict),
        does="keyword args of the selector, checked at load",
        acts_in=_READER,
        shown_by="tests/unit/test_config_parts.py",
    )


@dataclass
class TasksetConfig:
    """One taskset (`buffer.explorer_input.taskset` or an entry of `eval_tasksets`)."""

    name: str = field(
        metadata=fate(
            "taskset name in task ids and eval metrics",
            _READER,
            "tests/unit/test_taskset_publisher.py",
        )
    )
    path: str = field(
        metadata=fate(
            "storage_type file: a file or dataset folder; generator: the generator's name",
            _READER,
            "tests/unit/test_taskset_readers.py",
        )
    )
    storage_type: TasksetStorage = key(
        "file",
        does="file or generator (TASKSET_SOURCES)",
        acts_in=_READER,
        shown_by="tests/unit/test_taskset_readers.py",
    )
    split: str = key(
        "train",
        does="split read from a dataset folder",
        acts_in="rft/datasets/hf_dataset_reader.py",
        shown_by="tests/unit/test_taskset_readers.py",
    )
    subset_name: str | None = key(
        None,
        does="subset folder of a dataset repo",
        acts_in="rft/datasets/hf_dataset_reader.py",
        shown_by="tests/unit/test_taskset_readers.py",
    )
    format: FormatConfig = field(default_factory=FormatConfig)
    rollout_args: RolloutArgs = field(default_factory=RolloutArgs)
    repeat_times: int | None = key(
        bounded(None, ge=1),
        does="rollouts per task of this taskset (default: algorithm.repeat_times, 1 for eval)",
        acts_in=_READER,
        shown_by="tests/integration/test_rft_loop.py",
    )
    default_workflow_type: str | None = key(
        None,
        does="WORKFLOWS part building prompts and scoring (default: explorer_input's)",
        acts_in=_READER,
        shown_by="tests/unit/test_config_parts.py",
    )
    default_reward_fn_type: str | None = key(
        None,
        does="REWARD_FUNCTIONS part (default: explorer_input's)",
        acts_in=_READER,
        shown_by="tests/unit/test_config_parts.py",
    )
    workflow_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="carried to the workflow in the task's format map; checked at load against the "
        "args a workflow declares (multi-turn and countdown workflows)",
        acts_in=_READER,
        shown_by="tests/unit/test_multi_turn_config.py",
    )
    reward_fn_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="keyword args of the reward fn, checked at load against its signature and its entry's own checks",
        acts_in=_WORKFLOW,
        shown_by="tests/unit/test_rewards_math_verify.py",
    )
    generator_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="keyword args of the generator (storage_type generator), checked at load",
        acts_in=_READER,
        shown_by="tests/unit/test_config_parts.py",
    )
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
    default_workflow_type: str | None = key(
        None,
        does="workflow of tasksets that name none",
        acts_in=_DERIVED,
        shown_by="tests/unit/test_config_parts.py",
    )
    default_eval_workflow_type: str | None = key(
        None,
        does="workflow of eval tasksets that name none (default: default_workflow_type)",
        acts_in=_DERIVED,
        shown_by="tests/unit/test_config_effects.py",
    )
    default_reward_fn_type: str | None = key(
        None,
        does="reward fn of tasksets that name none",
        acts_in=_DERIVED,
        shown_by="tests/unit/test_config_parts.py",
    )


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

    enable: bool = key(
        False,
        does="complete groups wait in the priority replay buffer instead of the FIFO pool",
        acts_in=_REPLAY,
        shown_by="tests/integration/test_trainer_replay.py",
    )
    reuse_cooldown_time: float | None = key(
        bounded(None, ge=0),
        does="seconds before a trained group may be trained again (None: once)",
        acts_in=_REPLAY,
        shown_by="tests/unit/test_replay_buffer.py",
    )
    priority_fn: str = key(
        "linear_decay",
        does="PRIORITY_FNS: linear_decay, linear_decay_use_count_control_randomization",
        acts_in=_REPLAY,
        shown_by="tests/unit/test_priority_fns.py",
    )
    priority_fn_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="decay, use_count_limit, sigma; checked at load",
        acts_in=_REPLAY,
        shown_by="tests/unit/test_priority_fns.py",
    )

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
    `rft.consumers.replay.mirror`). storage_type `file` (the algorithms that train on a dataset,
    sft and cpt): `path` is the dataset, read with `format` (`split` / `subset_name` for a
    dataset directory), which `rft publish` renders onto the run's topic (`name` names its rows).
    """

    name: str = key(
        "experience_buffer",
        does="table name of the sql mirror",
        acts_in="consumers/replay/mirror.py",
        shown_by="tests/unit/test_experience_mirror.py",
    )
    storage_type: ExperienceStorage = key(
        "kafka",
        does="kafka/queue: the topic; sql: the topic plus a SQL mirror; file: a dataset that `rft publish` renders onto the run's topic (algorithm_type sft / cpt only)",
        acts_in="consumers/replay/mirror.py",
        shown_by="tests/unit/test_config_loading.py",
    )
    path: str | None = key(
        None,
        does="kafka: a topic name (checked); sql: the mirror's SQLAlchemy URL; file: a JSONL / JSON / Parquet / Arrow file or a local Hugging Face dataset directory",
        acts_in="consumers/replay/mirror.py",
        shown_by="tests/unit/test_config_loading.py",
    )
    split: str = key(
        "train",
        does="storage_type file: the split of a dataset directory",
        acts_in=_DATASET_PUBLISHER,
        shown_by="tests/unit/test_sft_config.py",
    )
    subset_name: str | None = key(
        None,
        does="storage_type file: the subset of a dataset directory",
        acts_in=_DATASET_PUBLISHER,
        shown_by="tests/unit/test_sft_config.py",
    )
    format: FormatConfig = field(default_factory=FormatConfig)
    max_read_timeout: float = key(
        bounded(1800.0, gt=0),
        does="seconds the trainer waits for a full batch; it stops after this long without experiences",
        acts_in=_TRAINER,
        shown_by="tests/integration/test_trainer_resume.py",
    )
    capacity: int = key(
        bounded(10000, ge=1),
        does="experiences the replay buffer holds (whole groups; the lowest priority is evicted); without replay the backlog waits in Kafka and this has no effect",
        acts_in=_REPLAY,
        shown_by="tests/unit/test_replay_buffer.py",
    )
    replay_buffer: ReplayBufferConfig = field(default_factory=ReplayBufferConfig)

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
    (alias `queue`): `path` is a topic of Experience events. `oracle`: `path` names a tool task's
    workflow, whose oracle plays train seeds through it (rft.workflows.demonstrations).
    """

    path: str = field(
        metadata=fate(
            "the demonstrations of `mix`: a dataset file or directory, or a topic",
            _EXPERT,
            "tests/unit/test_mix_sampler.py",
        )
    )
    name: str = key(
        "",
        does="names the source in demonstration ids (default: its key under auxiliary_buffers)",
        acts_in=_EXPERT,
        shown_by="tests/unit/test_mix_sampler.py",
    )
    storage_type: Literal["file", "kafka", "queue", "oracle"] = key(
        "file",
        does="EXPERT_SOURCES: file (dataset rows), kafka/queue (Experience events) or oracle (a tool task's demonstrations)",
        acts_in=_EXPERT,
        shown_by="tests/unit/test_mix_sampler.py",
    )
    split: str = key(
        "train",
        does="the split of a dataset directory",
        acts_in=_EXPERT,
        shown_by="tests/unit/test_mix_sampler.py",
    )
    subset_name: str | None = key(
        None,
        does="the subset of a dataset directory",
        acts_in=_EXPERT,
        shown_by="tests/unit/test_mix_sampler.py",
    )
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
    max_staleness: int | None = key(
        bounded(None, ge=0),
        does="rft's older key, an alias of algorithm.sample_strategy_args.max_staleness: an experience made by version v is dropped (and counted) when its batch would train at a version > v + max_staleness (None: any age; 0: only the current version); set with sample_strategy default it selects staleness_control; rft train --from-topic and algorithms that train on a dataset (sft, cpt, dpo) set both aside with a warning (consumers/trainer/offline_input.py)",
        acts_in=_STRATEGY,
        shown_by="tests/unit/test_config_effects.py",
    )
    auxiliary_buffers: dict[str, AuxiliaryBufferConfig] = field(default_factory=dict)


@dataclass
class BufferConfig:
    """`buffer`: batch sizes, epochs and the explorer/trainer inputs."""

    batch_size: int | None = key(
        bounded(None, ge=1),
        does="tasks per explorer step, not multiplied by repeat_times (default: train_batch_size / repeat_times, so Trinity's trainer-only configs load)",
        acts_in=_PLAN,
        shown_by="tests/unit/test_config_parts.py",
    )
    train_batch_size: int | None = key(
        bounded(None, ge=1),
        does="experiences per train step (default: batch_size × repeat_times)",
        acts_in=_PLAN,
        shown_by="tests/unit/test_config_parts.py",
    )
    total_epochs: int = key(
        bounded(1, ge=1),
        does="epochs published; the step count when total_steps is unset",
        acts_in=_PLAN,
        shown_by="tests/unit/test_config_effects.py",
    )
    total_steps: int | None = key(
        bounded(None, ge=1),
        does="explorer and trainer steps of the run; when set, total_epochs has no effect (rft train --from-topic: a cap on its steps)",
        acts_in=_PLAN,
        shown_by="tests/integration/test_rft_loop.py",
    )
    explorer_input: ExplorerInputConfig = field(default_factory=ExplorerInputConfig)
    trainer_input: TrainerInputConfig = field(default_factory=TrainerInputConfig)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "max_retry_times": "retries of a failed rollout follow explorer.max_retry_times",
        "max_retry_interval": "Kafka clients retry on their own schedule",
    }


@dataclass
class RolloutModelConfig:
    """`explorer.rollout_model`: the rollout engine. The keys only one engine reads are declared
    by the engine (its spec's `keys`) and bound here too: see the sections per engine below."""

    engine_type: str = key(
        "hf",
        does="ROLLOUT_ENGINES part (rft.engines.rollout): hf, vllm, replay or openai (a client of an OpenAI-compatible server; docs/serve.md)",
        acts_in=_EXPLORER,
        shown_by="tests/unit/test_config_parts.py",
    )
    engine_num: int = key(
        bounded(1, ge=1),
        does="GPUs reserved for rollout before the trainer's",
        acts_in=_PLAN,
        shown_by="tests/unit/test_run_plan.py",
    )
    tensor_parallel_size: int = key(
        bounded(1, ge=1),
        does="multiplies the rollout GPUs reserved",
        acts_in=_PLAN,
        shown_by="tests/unit/test_run_plan.py",
    )
    seed: int = key(
        42,
        does="sampling seed per step, publish shuffle seed, tiny model init",
        acts_in=_EXPLORER,
        shown_by="tests/integration/test_rft_loop.py",
    )
    dtype: DType | None = key(
        None,
        does="rollout dtype, and so the dtype versions are published in (default: model.dtype)",
        acts_in=_PLAN,
        shown_by="tests/unit/test_run_plan.py",
    )
    enable_thinking: bool | None = key(
        None,
        does="passed to chat templates that support it",
        acts_in=_EXPLORER,
        shown_by="tests/unit/test_explorer_settings.py",
    )
    enforce_eager: bool = key(
        False,
        does="vllm: no CUDA graphs; hf: no static-cache + torch.compile path on a GPU",
        acts_in="rft/engines/rollout.py",
        shown_by="tests/unit/test_vllm_engine.py",
    )
    max_model_len: int | None = key(
        bounded(None, ge=2),
        does="alias of model.max_model_len, the one bound for rollouts and training (a different value is refused at load); the vllm engine's bound",
        acts_in=_DERIVED,
        shown_by="tests/unit/test_vllm_engine.py",
    )
    tool_call_parser: str = key(
        "hermes",
        does="TOOL_CALL_PARSERS entry serve mode reads tool calls in replies with, when a request offers tools (workflows read a taskset's format.tool_call_parser)",
        acts_in="consumers/serve/server.py",
        shown_by="tests/unit/test_config_validation.py",
    )
    base_url: str | None = key(
        None,
        does="engine_type openai: the OpenAI-compatible server rollouts are generated by (ending in /v1; required by that engine); other engines refuse it at load",
        acts_in="rft/engines/openai_engine.py",
        shown_by="tests/integration/test_openai_engine.py",
    )
    api_key: str | None = key(
        None,
        does="engine_type openai: the key sent to base_url as a bearer token; other engines refuse it at load",
        acts_in="rft/engines/openai_engine.py",
        shown_by="tests/integration/test_openai_engine.py",
        shown_default="$OPENAI_API_KEY",
    )
    engine_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="the engine's own settings: the keys its ROLLOUT_ENGINES entry reads (`args`); others are refused at load",
        acts_in=_ROLLOUT_CHECKS,
        shown_by="tests/unit/test_config_parts.py",
    )

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "enable_history": "workflows return their experiences explicitly",
        "enable_openai_api": "workflows get an in-process OpenAI-style client "
        "(rft.engines.openai_facade); `mode: serve` serves the endpoint over HTTP",
        "enable_chunked_prefill": "vllm 0.26 always chunks long prefills; the hf engine does not",
        "use_v1": "vllm 0.26 has only its V1 engine",
        "enable_auto_tool_choice": "a tool workflow offers its tools and runs every call the "
        "reply makes; serve mode reads tool calls whenever a request offers tools",
    }
    VALUE_ALIASES: ClassVar[dict[str, dict[str, Alias]]] = {
        "engine_type": {"vllm_async": Alias("vllm")},
    }
    # the selected engine's own keys are bound beside these (rft.catalog.part_keys)
    PART_KEYS: ClassVar[str] = "engine_type"
    part_keys: dict[str, Any] = field(default_factory=dict, init=False, repr=False)


@dataclass
class ServeConfig:
    """`explorer.serve`: the OpenAI-compatible endpoint of `mode: serve` (rft.consumers.serve)."""

    host: str = key(
        "127.0.0.1",
        does="address the server binds (localhost unless set otherwise)",
        acts_in="consumers/serve/server.py",
        shown_by="tests/unit/test_config_validation.py",
    )
    port: int = key(
        bounded(8000, ge=1, le=65535),
        does="TCP port the server listens on",
        acts_in="consumers/serve/server.py",
        shown_by=_SERVE_TEST,
    )
    api_key: str | None = key(
        None,
        does="callers must send `Authorization: Bearer <key>` (401 otherwise); default: $RFT_SERVE_API_KEY; with neither, a server bound to a non-loopback host is refused at start",
        acts_in="consumers/serve/app.py",
        shown_by=_SERVE_TEST,
        shown_default="$RFT_SERVE_API_KEY",
    )
    model_name: str = key(
        "rft-policy",
        does="the one model id /v1/models lists and requests must name (404 otherwise)",
        acts_in="rft/serve/requests.py",
        shown_by="tests/unit/test_serve_shapes.py",
    )
    max_body_bytes: int = key(
        bounded(1_000_000, ge=1024),
        does="largest request body accepted (413 beyond)",
        acts_in="consumers/serve/app.py",
        shown_by=_SERVE_TEST,
    )
    max_completion_tokens: int | None = key(
        bounded(None, ge=1),
        does="most tokens a request may ask for, and what it gets when it names none (default: model.max_response_tokens); prompts are bound by model.max_prompt_tokens and model.max_model_len",
        acts_in="rft/serve/requests.py",
        shown_by="tests/unit/test_config_validation.py",
    )
    max_n: int = key(
        bounded(8, ge=1),
        does="most choices (`n`) one request may ask for",
        acts_in="rft/serve/requests.py",
        shown_by=_SERVE_TEST,
    )
    max_sessions: int = key(
        bounded(64, ge=1),
        does="open sessions (answered, awaiting feedback) at once; a call opening one more gets 429",
        acts_in=_SERVE,
        shown_by=_SERVE_TEST,
    )
    session_ttl_s: float = key(
        bounded(600.0, gt=0),
        does="seconds after its last call a session without feedback is dead-lettered",
        acts_in=_SERVE,
        shown_by=_SERVE_TEST,
    )
    concatenated: bool = key(
        True,
        does="a session's chain of calls is one experience with holed action masks (off: one experience per call, step-wise)",
        acts_in="rft/serve/sessions.py",
        shown_by="tests/unit/test_serve_shapes.py",
    )


_AUX = "rft/engines/auxiliary_models.py"
_AUX_TEST = "tests/unit/test_auxiliary_models.py"


@dataclass
class AuxiliaryModelConfig:
    """An entry of `explorer.auxiliary_models`: a further model beside the policy (a judge, a
    teacher, a user simulator), reached by name from workflows and from the reward functions that
    ask one. It is frozen: it never loads the trainer's weight versions."""

    name: str | None = key(
        None,
        does='the name workflows and rewards reach it by (default: its position, "0", "1", ...); names are unique',
        acts_in=_AUX,
        shown_by=_AUX_TEST,
    )
    engine_type: str = key(
        "hf",
        does="ROLLOUT_ENGINES entry that serves it: hf or vllm (its own copy of model_path, in the explorer's process) or openai (a client of base_url); an entry whose spec has no `auxiliary` is refused",
        acts_in=_ROLLOUT_CHECKS,
        shown_by=_AUX_TEST,
    )
    model_path: str | None = key(
        None,
        does="hf / vllm: the model it loads (default: model.model_path, a frozen copy of the base policy); refused for an engine whose weights live in a server",
        acts_in="consumers/run_plan.py",
        shown_by=_AUX_TEST,
    )
    base_url: str | None = key(
        None,
        does="engine_type openai: the OpenAI-compatible server it asks (ending in /v1; required there, refused elsewhere)",
        acts_in="rft/engines/auxiliary_chat.py",
        shown_by="tests/integration/test_auxiliary_judge.py",
    )
    api_key: str | None = key(
        None,
        does="engine_type openai: the bearer key sent to base_url (refused elsewhere)",
        acts_in="rft/engines/auxiliary_chat.py",
        shown_by="tests/integration/test_auxiliary_judge.py",
        shown_default="$OPENAI_API_KEY",
    )
    dtype: DType | None = key(
        None,
        does="hf / vllm: the dtype it is loaded in (default: model.dtype)",
        acts_in="consumers/run_plan.py",
        shown_by=_AUX_TEST,
    )
    chat_template: str | None = key(
        None,
        does="a Jinja chat template replacing its tokenizer's (hf / vllm)",
        acts_in="rft/engines/auxiliary_chat.py",
        shown_by=_AUX_TEST,
    )
    enable_thinking: bool | None = key(
        None,
        does="passed to its chat template (hf / vllm)",
        acts_in="rft/engines/auxiliary_chat.py",
        shown_by=_AUX_TEST,
    )
    engine_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="the engine's own settings: for openai `model` (the id requests name, default rft-policy); for vllm its explorer.rollout_model settings (gpu_memory_utilization, max_model_len, enforce_eager, ...); others are refused at load",
        acts_in=_ROLLOUT_CHECKS,
        shown_by=_AUX_TEST,
    )

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "engine_num": "one engine per auxiliary model in each explorer process",
        "tensor_parallel_size": "an auxiliary model runs in the explorer's process on its device; "
        "no GPUs are reserved for it (docs/known-limits.md)",
        "enable_openai_api": "workflows reach an auxiliary model by name "
        "(Workflow.auxiliary_models); engine_type openai asks a server",
        "enable_history": "callers keep what they asked",
        "use_v1": "vllm 0.26 has only its V1 engine",
        "enable_chunked_prefill": "vllm 0.26 always chunks long prefills; the hf engine does not",
        "enable_auto_tool_choice": "auxiliary models answer with text",
        "tool_call_parser": "auxiliary models answer with text",
        "reasoning_parser": "auxiliary models answer with text",
        "max_prompt_tokens": "callers bound their prompts",
        "max_response_tokens": "each call says its max_tokens (a judge reward: reward_fn_args.max_tokens)",
        "temperature": "each call says its temperature",
        "seed": "calls are not seeded",
    }


@dataclass
class ExplorerConfig:
    """`explorer`: rollout workers (one consumer-group member each) and evaluation."""

    name: str = key(
        "explorer",
        does="the explorer's consumer group: same name shares tasks, a new one copies the stream",
        acts_in=_PLAN,
        shown_by="tests/unit/test_trinity_examples.py",
    )
    runner_per_model: int = key(
        bounded(8, ge=1),
        does="tasks in one batched engine call",
        acts_in="rft/workflows/step_runner.py",
        shown_by="tests/unit/test_step_runner.py",
    )
    runner_num: int | None = key(
        bounded(None, ge=1),
        does="Trinity's total: runner_per_model = runner_num / engine_num (default: engine_num × runner_per_model)",
        acts_in=_DERIVED,
        shown_by="tests/unit/test_config_parts.py",
    )
    max_timeout: float = key(
        bounded(900.0, gt=0),
        does="seconds a task's workflow may run; then it is retried, then dead-lettered",
        acts_in="rft/workflows/step_runner.py",
        shown_by="tests/unit/test_step_runner.py",
    )
    max_retry_times: int = key(
        bounded(2, ge=0),
        does="retries of a failed or timed-out task",
        acts_in="rft/workflows/step_runner.py",
        shown_by="tests/unit/test_step_runner.py",
    )
    env_vars: dict[str, str] = key(
        field(default_factory=dict),
        does="set in the explorer process before torch starts",
        acts_in="consumers/explorer/env_vars.py",
        shown_by="tests/unit/test_explorer_settings.py",
    )
    rollout_model: RolloutModelConfig = field(default_factory=RolloutModelConfig)
    auxiliary_models: list[AuxiliaryModelConfig] = field(default_factory=list)
    serve: ServeConfig = field(default_factory=ServeConfig)
    eval_interval: int = key(
        bounded(100, ge=1),
        does="explorer steps between evaluations",
        acts_in=_EXPLORER,
        shown_by="tests/integration/test_rft_loop.py",
    )
    eval_on_startup: bool = key(
        True,
        does="evaluate before the first step",
        acts_in=_EXPLORER,
        shown_by="tests/integration/test_rft_loop.py",
    )
    bench_on_latest_checkpoint: bool = key(
        False,
        does="mode bench evaluates only the newest version, not each one",
        acts_in="consumers/ops/bench.py",
        shown_by="tests/unit/test_bench.py",
    )
    tasks_from: str = key(
        "earliest",
        does="where a new explorer group first reads the tasks: earliest, latest or a timestamp (ISO 8601 or ms since the epoch); a group with committed offsets resumes from them",
        acts_in=_EXPLORER,
        shown_by="tests/integration/test_explorer_groups.py",
    )
    experiences_to: str = key(
        "trainer",
        does="the explorer group's experience topic: `trainer` (the trainer's), `own` (<project>.<name>.experiences.<explorer.name>, a shadow the trainer never reads), or a topic name",
        acts_in=_PLAN,
        shown_by="tests/integration/test_explorer_groups.py",
    )
    max_explorers: int | None = key(
        bounded(None, ge=1),
        does="explorer processes a group is sized for: the tasks topic gets at least that many partitions (default: rollout_model.engine_num, the ray launcher's explorers)",
        acts_in=_PLAN,
        shown_by="tests/unit/test_explorer_groups_plan.py",
    )

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "over_rollout": "explorers commit each task as it finishes; no batch waits to trim",
        "dynamic_timeout": "timeouts are fixed by max_timeout",
        "runner_state_report_interval": "runner state is reported through metrics",
        "service_status_check_interval": _RAY,
    }


@dataclass
class OptimizerConfig:
    """`trainer.optim` (also read from Trinity-RFT's `algorithm.optimizer`): AdamW settings."""

    lr: float = key(
        bounded(1e-6, gt=0),
        does="AdamW learning rate",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_engines_trainer.py",
    )
    betas: list[float] = key(
        bounded([0.9, 0.999], ge=0, lt=1),
        does="AdamW betas (two numbers)",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_config_parts.py",
    )
    weight_decay: float = key(
        bounded(0.01, ge=0),
        does="AdamW weight decay",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_engines_trainer.py",
    )
    lr_warmup_steps: int = key(
        bounded(0, ge=0),
        does="linear warmup steps",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_config_effects.py",
    )
    lr_warmup_steps_ratio: float = key(
        bounded(0.0, ge=0, le=1),
        does="warmup as a share of total steps when lr_warmup_steps is 0",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_config_effects.py",
    )
    warmup_style: str = key(
        "constant",
        does="a name in LR_SCHEDULES (rft.engines.trainer): constant, cosine, linear",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_lr_schedules.py",
    )
    min_lr_ratio: float = key(
        bounded(0.0, ge=0, le=1),
        does="floor of the cosine / linear schedule",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_lr_schedules.py",
    )

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "total_training_steps": "derived from buffer.total_steps / total_epochs",
        "optimizer_type": "rft's torch trainer uses AdamW",
    }


@dataclass
class CriticOptimConfig:
    """`critic.optim`: the critic's AdamW (veRL's key names; its own, apart from the policy's)."""

    lr: float = key(
        bounded(1e-5, gt=0),
        does="the critic's AdamW learning rate (constant)",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_ppo_critic.py",
    )
    betas: list[float] = key(
        bounded([0.9, 0.999], ge=0, lt=1),
        does="the critic's AdamW betas (two numbers)",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_ppo_critic.py",
    )
    weight_decay: float = key(
        bounded(0.01, ge=0),
        does="the critic's AdamW weight decay",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_ppo_critic.py",
    )

    REFUSED_KEYS: ClassVar[dict[str, str]] = {
        name: "the critic's learning rate is constant in rft (critic.optim.lr)"
        for name in (
            "lr_warmup_steps",
            "lr_warmup_steps_ratio",
            "warmup_style",
            "lr_scheduler_type",
            "min_lr_ratio",
            "num_cycles",
            "total_training_steps",
        )
    } | {"optimizer": "the critic's optimizer is AdamW"}


@dataclass
class CriticConfig:
    """`critic`: the critic of PPO (veRL's section and key names), read when a critic is
    trained (`algorithm.use_critic`, or an advantage fn that reads values: algorithm_type ppo).
    Its model is `model.critic_model_path`; it runs on the trainer's device, micro-batched as
    the policy (`trainer.micro_batch_size`), one update per train step."""

    optim: CriticOptimConfig = field(default_factory=CriticOptimConfig)
    cliprange_value: float = key(
        bounded(0.5, gt=0),
        does="clip range of the value loss: a value moving more than this from the one the advantages used gains nothing (rft.algorithms.value_loss)",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_ppo_critic.py",
    )
    grad_clip: float = key(
        bounded(1.0, gt=0),
        does="gradient norm clip of the critic's update",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_ppo_critic.py",
    )
    loss_agg_mode: str = key(
        "token-mean",
        does="a name in LOSS_AGG_MODES: how the value loss's tokens become the batch loss",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_ppo_critic.py",
    )

    REFUSED_KEYS: ClassVar[dict[str, str]] = {
        "ppo_epochs": "rft takes one critic update per train step (one pass over the batch)",
        "ppo_mini_batch_size": "rft takes one critic update per train step over the whole batch",
        "model": "the critic's model is model.critic_model_path",
        "critic_warmup": "the policy trains from the first step",
        "ppo_micro_batch_size": "the critic is micro-batched as the policy: trainer.micro_batch_size",
        "ppo_micro_batch_size_per_gpu": "the critic is micro-batched as the policy: trainer.micro_batch_size",
        "forward_micro_batch_size": "the critic is micro-batched as the policy: trainer.micro_batch_size",
        "forward_micro_batch_size_per_gpu": "the critic is micro-batched as the policy: trainer.micro_batch_size",
        "shuffle": "rft takes one critic update per train step over the whole batch",
    }
    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        name: _VERL
        for name in (
            "strategy",
            "rollout_n",
            "use_dynamic_bsz",
            "ppo_max_token_len_per_gpu",
            "forward_max_token_len_per_gpu",
            "ulysses_sequence_parallel_size",
            "checkpoint",
            "profiler",
            "enable",
        )
    }


@dataclass
class TrainerConfig:
    """`trainer`: the trainer engine, checkpointing and optimisation."""

    name: str = key(
        "trainer",
        does="the trainer's consumer group",
        acts_in=_PLAN,
        shown_by="tests/unit/test_config_effects.py",
    )
    trainer_type: str = key(
        "torch",
        does="a name in TRAINER_ENGINES (rft.engines.trainer): torch (one process) or fsdp2 (N ranks); verl reads as fsdp2, with a warning",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_trainer_engines.py",
    )
    trainer_strategy: TrainerStrategy | None = key(
        None,
        does="Trinity's sharding strategy: fsdp2 (fsdp reads as fsdp2) turns the torch engine into the fsdp2 engine; megatron is refused",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_trainer_engines.py",
    )
    world_size: int | None = key(
        bounded(None, ge=1),
        does="ranks of the fsdp2 engine (default: the GPUs left after rollout, 1 on the CPU)",
        acts_in=_PLAN,
        shown_by="tests/unit/test_trainer_engines.py",
    )
    save_interval: int = key(
        bounded(100, ge=1),
        does=(
            "steps between versions that carry optimizer state (trainer_state/); one due while "
            "the last is still being written goes with the first version after it"
        ),
        acts_in="consumers/trainer/checkpoint.py",
        shown_by="tests/unit/test_trainer_checkpoint.py",
    )
    grad_clip: float = key(
        bounded(1.0, gt=0),
        does="gradient norm clip",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_engines_trainer.py",
    )
    total_steps: int | None = key(
        bounded(None, ge=1),
        does="train steps (default: buffer.total_steps)",
        acts_in=_PLAN,
        shown_by="tests/integration/test_trainer_resume.py",
    )
    micro_batch_size: int = key(
        bounded(4, ge=1),
        does="experiences per forward pass on one device (gradient accumulation); with use_dynamic_bsz the token budget decides instead",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_engines_trainer.py",
    )
    max_checkpoints_to_keep: int | None = key(
        bounded(None, ge=1),
        does="older versions are pruned after each publish, except those live explorers report loaded (None keeps all)",
        acts_in=_TRAINER,
        shown_by="tests/integration/test_trainer_resume.py",
    )
    use_dynamic_bsz: bool = key(
        False,
        does="micro-batches by token count instead of micro_batch_size rows: consecutive experiences while rows × (longest prompt + longest response) ≤ max_token_len_per_gpu; changes memory and step time, never the loss",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_trainer_memory.py",
    )
    max_token_len_per_gpu: int | None = key(
        bounded(None, ge=2),
        does="with use_dynamic_bsz: padded tokens per micro-batch on one device (default: 2 × model.max_model_len); an experience longer than it is a micro-batch of its own",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_trainer_memory.py",
    )
    ppo_max_token_len_per_gpu: int | None = key(
        bounded(None, ge=2),
        does="verl's name for max_token_len_per_gpu (refused when both are set and differ)",
        acts_in=_TRAINER,
        shown_by="tests/unit/test_trainer_memory.py",
    )
    enable_gradient_checkpointing: bool = key(
        False,
        does="recompute each decoder layer's activations in backward instead of keeping them (torch and fsdp2 engines)",
        acts_in="rft/engines/activation_checkpointing.py",
        shown_by="tests/unit/test_trainer_memory.py",
    )
    param_offload: bool = key(
        False,
        does="fsdp2 only: parameter shards, gradients and the AdamW step on the CPU (FSDP2's CPU offload policy), each layer copied to the device while it computes",
        acts_in="rft/engines/fsdp_worker.py",
        shown_by="tests/unit/test_trainer_memory.py",
    )
    optimizer_offload: bool = key(
        False,
        does="AdamW's moments kept on the CPU between steps, on the device only for the update (torch and fsdp2 engines; nothing to move on the CPU)",
        acts_in="rft/engines/trainer.py",
        shown_by="tests/unit/test_trainer_memory.py",
    )
    optim: OptimizerConfig = field(default_factory=OptimizerConfig)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "save_strategy": "one trainer process writes each checkpoint",
        "save_hf_checkpoint": "checkpoints are always saved as safetensors with a manifest",
        "grad_offload": "gradients follow the parameters: on the CPU with param_offload",
        "offload_policy": "param_offload selects FSDP2's CPU offload policy",
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

    sync_method: str = key(
        "checkpoint",
        does="a name in WEIGHT_TRANSPORTS (rft.synchronizer.transport). checkpoint: versions reach explorers through the object store only; nccl: the trainer also broadcasts each version's weights to the explorers of its weight-sync group (NCCL between GPUs, gloo on the CPU) before writing it to the store; memory: the same group, but the trainer shares each version's memory with explorers on its own host (CUDA IPC on a GPU, even the trainer's own GPU, where NCCL cannot go; shared memory on the CPU) and each copies it into its own; explorers elsewhere use the store. With nccl and memory an explorer samples with a version at once but commits a step only once that version's manifest is announced (docs/weight-sync.md)",
        acts_in="rft/synchronizer/fast_path.py",
        shown_by="tests/integration/test_fast_weights.py",
    )
    weight_group_address: str = key(
        "127.0.0.1:29517",
        does="host:port of the weight-sync group's rendezvous, which the trainer hosts (sync_method: nccl or memory); explorers on other hosts need the trainer host's address here",
        acts_in="rft/synchronizer/fast_path.py",
        shown_by="tests/unit/test_weight_group.py",
    )
    weight_group_timeout: float = key(
        bounded(30.0, gt=0),
        does="seconds the trainer waits for one group formation and one version's delivery (nccl: its broadcasts; memory: every explorer's acknowledgement) before it goes on without a dead or hung explorer, to which that version goes by the store only (sync_method: nccl or memory)",
        acts_in="rft/synchronizer/weight_group.py",
        shown_by="tests/unit/test_weight_group.py",
    )
    sync_style: str = key(
        "fixed",
        does="a name in SYNC_STYLES (rft.synchronizer): when explorers wait for and request versions",
        acts_in=_EXPLORER,
        shown_by="tests/integration/test_rft_loop.py",
    )
    sync_interval: int = key(
        bounded(1, ge=1),
        does="trainer steps between weight versions",
        acts_in=_TRAINER,
        shown_by="tests/integration/test_rft_loop.py",
    )
    sync_offset: int = key(
        bounded(0, ge=0),
        does="explorer steps taken before the trainer starts (under fixed)",
        acts_in=_EXPLORER,
        shown_by="tests/integration/test_rft_loop.py",
    )
    sync_timeout: float = key(
        bounded(1200.0, gt=0),
        does="seconds an explorer waits for a version before on_sync_timeout applies",
        acts_in=_EXPLORER_SYNC,
        shown_by="tests/integration/test_explorer_sync.py",
    )
    on_sync_timeout: SyncTimeoutAction = key(
        "wait",
        does="what an explorer does when a version it needs has not arrived within sync_timeout: wait (warn, count it in sync_timeouts_total, keep waiting) or stop (fail with the reason); it never rolls out on older weights than its style allows",
        acts_in=_EXPLORER_SYNC,
        shown_by="tests/integration/test_explorer_sync.py",
    )
    max_head_offpolicyness: int | None = key(
        bounded(None, ge=0),
        does="AReaL's η: explorer step s waits until it holds version >= s-1-η, so no rollout starts more than η versions ahead of the newest weights (None: no bound; every style; checked against sync_interval at load)",
        acts_in=_EXPLORER_SYNC,
        shown_by="tests/integration/test_sync_admission.py",
    )

    VALUE_ALIASES: ClassVar[dict[str, dict[str, Alias]]] = {
        "sync_style": {
            "explorer_driven": Alias("dynamic_by_explorer"),
            "dynamic_by_trainer": Alias("trainer_driven"),
        },
    }


@dataclass
class MonitorConfig:
    """`monitor`: the sinks that metrics from the `metrics` topic are written to.

    `monitor_type` names sinks of `rft.consumers.metrics.sinks.METRIC_SINKS` (one name or a list);
    `monitor_args` holds their settings, per sink (`{tensorboard: {log_dir: ...}}`) or, with one
    sink, flat. `rft.consumers.metrics.sinks.check_sinks` checks both. `trace_exporter`, `trace_args`
    and `trace_content` set the OpenTelemetry spans of every process (`rft.tracing.setup`).
    """

    monitor_type: list[str] = key(
        field(default_factory=lambda: ["console"]),
        does="METRIC_SINKS: console, jsonl, sql, tensorboard, wandb, mlflow",
        acts_in=_SINKS,
        shown_by="tests/unit/test_metric_sinks.py",
    )
    monitor_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="settings per sink",
        acts_in=_SINKS,
        shown_by="tests/unit/test_metric_sinks.py",
    )
    trace_exporter: str = key(
        field(default_factory=lambda: os.environ.get("RFT_TRACE_EXPORTER", "none")),
        does="where each process's spans go, a name in SPAN_EXPORTERS (rft.tracing.setup): none, console, file, otlp, zipkin (the local stack's Zipkin, which `rft run` then starts)",
        shown_default="$RFT_TRACE_EXPORTER, else none",
        acts_in="rft/tracing/setup.py",
        shown_by="tests/unit/test_trace_exporters.py",
    )
    trace_args: dict[str, Any] = key(
        field(default_factory=dict),
        does="the exporter's settings (file: path; otlp: protocol, endpoint, headers, timeout, insecure; zipkin: endpoint, timeout)",
        acts_in="rft/tracing/setup.py",
        shown_by="tests/unit/test_trace_exporters.py",
    )
    trace_content: bool = key(
        False,
        does="prompt and response text on the explorer.rollout spans (off: ids and sizes only)",
        acts_in="rft/workflows/rollout_spans.py",
        shown_by="tests/unit/test_rollout_spans.py",
    )

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "enable_ray_timeline": _RAY,
    }


@dataclass
class OperatorConfig:
    """An entry of `data_processor.experience_pipeline.operators`: one experience operator."""

    name: str = field(
        metadata=fate(
            "the EXPERIENCE_OPERATORS part (reward_filter, reward_std_filter, dapo_dynamic_sampling, invalid_reward_filter, mask_response_truncated, reward_shaping_mapper, pass_rate_calculator), checked at load with a did-you-mean; data_juicer is not built",
            _PIPELINE,
            "tests/unit/test_experience_operators.py",
        )
    )
    args: dict[str, Any] = key(
        field(default_factory=dict),
        does="the operator's keyword args, checked at load against its signature",
        acts_in=_PIPELINE,
        shown_by="tests/unit/test_experience_operators.py",
    )


@dataclass
class ExperiencePipelineConfig:
    """`data_processor.experience_pipeline`: operators the trainer applies, in order, to each
    sampled batch before the step (rft.buffer.experience_pipeline)."""

    operators: list[OperatorConfig] = field(default_factory=list)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "save_input": "the experience topic already keeps every input experience; the pipeline "
        "runs in the trainer on what it reads",
        "input_save_path": "the experience topic already keeps every input experience",
        "inputs": "the pipeline reads the trainer's sampled batches only; extra input buffers "
        "are not supported (buffer.trainer_input.auxiliary_buffers feed demonstrations)",
        "output": "the pipeline's output is the trainer's batch",
    }


@dataclass
class DataProcessorConfig:
    """`data_processor`: Trinity's data pipelines; rft runs the experience pipeline."""

    experience_pipeline: ExperiencePipelineConfig = field(default_factory=ExperiencePipelineConfig)

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "task_pipeline": "task pipelines are not supported yet; tasks are published as the "
        "taskset holds them",
    }


@dataclass
class RftConfig:
    """A whole run: the top-level keys and one dataclass per section."""

    project: str = field(
        metadata=fate(
            "names the run: topics <project>.<name>.*, groups, checkpoint prefix",
            _PLAN,
            "tests/integration/test_rft_loop.py",
        )
    )
    name: str = field(
        metadata=fate(
            "names the run with project",
            _PLAN,
            "tests/integration/test_rft_loop.py",
        )
    )
    model: ModelConfig
    buffer: BufferConfig
    mode: Mode = key(
        "both",
        does="both / explore / train / bench / serve select what `rft run` starts (serve: the OpenAI-compatible endpoint, explorer.serve)",
        acts_in="rft/cli/run_cmd.py",
        shown_by="tests/integration/test_bench.py",
    )
    checkpoint_root_dir: str = key(
        "./checkpoints",
        does="root of the run's local job dir (logs, monitor output)",
        acts_in="rft/supervisor/run_supervisor.py",
        shown_by="tests/unit/test_metric_sinks.py",
    )
    continue_from_checkpoint: bool = key(
        True,
        does="a restarted trainer resumes from its newest version; an explorer from its committed step",
        acts_in=_TRAINER,
        shown_by="tests/integration/test_trainer_resume.py",
    )
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    explorer: ExplorerConfig = field(default_factory=ExplorerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    synchronizer: SynchronizerConfig = field(default_factory=SynchronizerConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    data_processor: DataProcessorConfig = field(default_factory=DataProcessorConfig)
    stack: StackSettings = field(default_factory=StackSettings)  # rft: Kafka and object store
    plugins: list[str] = key(
        field(default_factory=list),
        does="modules (dotted names or .py files) imported before the config's names are checked, so parts they register can be selected; RFT_PLUGINS adds more",
        acts_in="rft/catalog/plugins.py",
        shown_by="tests/unit/test_config_parts.py",
    )

    IGNORED_KEYS: ClassVar[dict[str, str]] = {
        "ray_namespace": _RAY,
        "service": "the Data-Juicer service is not supported",
        "log": "rft logs through Python logging; set the level with RFT_LOG_LEVEL",
        "actor_rollout_ref": _VERL,
        "hf_checkpoint_dir": "checkpoints live in the object store",
    }

    @property
    def job_dir(self) -> Path:
        """Local directory of this run: `<checkpoint_root_dir>/<project>/<name>`."""
        return Path(self.checkpoint_root_dir) / self.project / self.name

    def to_dict(self, include_secrets: bool = False) -> dict[str, Any]:
        """Plain data (paths as strings). Secrets are left out unless asked for."""
        fields = _inline_part_keys(_plain(asdict(self)))
        data = {key: fields[key] for key in _TOP_LEVEL_ORDER}
        if not include_secrets:
            data["stack"]["object_store"].pop("access_key", None)
            data["stack"]["object_store"].pop("secret_key", None)
            data["explorer"]["serve"].pop("api_key", None)
            data["explorer"]["rollout_model"].pop("api_key", None)
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
    "critic",
    "synchronizer",
    "monitor",
    "data_processor",
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


def _inline_part_keys(value: Any) -> Any:
    """A section's part keys written back beside its own keys, where they were read from."""
    if isinstance(value, dict):
        inlined = {k: _inline_part_keys(v) for k, v in value.items() if k != "part_keys"}
        return {**inlined, **value.get("part_keys", {})}
    if isinstance(value, list):
        return [_inline_part_keys(v) for v in value]
    return value


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
