"""The fate of every config key: the code that acts on it and the test that shows it does.

One row per field of the config dataclasses, keyed `Section.field` (a taskset's fields serve the
training taskset and every eval taskset alike). Keys that rft accepts without acting on are not
fields: they live in each section's IGNORED_KEYS with the sentence the user is warned with.
`tests/unit/test_key_fates.py` fails when a field has no row here, or a row names a module or test
that does not mention its key; `rft config keys` prints the table.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Fate:
    """What one key does (`does`), where (`acts_in`), and the test that exercises it."""

    does: str
    acts_in: str
    shown_by: str


_PLAN = "consumers/run_plan.py"
_ROLLOUT = "rft/engines/rollout.py"
_DERIVED = "rft/config/derived.py"
_PARTS = "rft/catalog/parts.py"
_EXPLORER = "consumers/explorer.py"
_EXPLORER_SYNC = "consumers/explorer_sync.py"
_TRAINER = "consumers/trainer.py"
_PRESETS = "rft/algorithms/presets.py"
_SINKS = "consumers/metric_sinks.py"
_WORKFLOW = "rft/workflows/workflow.py"
_READER = "producers/taskset_reader.py"
_STRATEGY = "rft/buffer/sample_strategy.py"
_REPLAY = "rft/buffer/replay_buffer.py"
_EXPERT = "rft/buffer/expert_source.py"

KEY_FATES: dict[str, Fate] = {
    # -- the run
    "RftConfig.project": Fate(
        "names the run: topics <project>.<name>.*, groups, checkpoint prefix",
        _PLAN,
        "tests/integration/test_rft_loop.py",
    ),
    "RftConfig.name": Fate(
        "names the run with project", _PLAN, "tests/integration/test_rft_loop.py"
    ),
    "RftConfig.mode": Fate(
        "both / explore / train / bench select what `rft run` starts; serve is refused",
        "rft/cli/run_cmd.py",
        "tests/integration/test_bench.py",
    ),
    "RftConfig.checkpoint_root_dir": Fate(
        "root of the run's local job dir (logs, monitor files)",
        "rft/supervisor/run_supervisor.py",
        "tests/unit/test_metric_sinks.py",
    ),
    "RftConfig.continue_from_checkpoint": Fate(
        "a restarted trainer resumes from its newest version; an explorer from its committed step",
        _TRAINER,
        "tests/integration/test_trainer_resume.py",
    ),
    "RftConfig.plugins": Fate(
        "modules imported before names are checked, so their parts can be selected",
        _PARTS,
        "tests/unit/test_config_parts.py",
    ),
    # -- algorithm
    "AlgorithmConfig.algorithm_type": Fate(
        "the preset of parts (ALGORITHM_TYPES)", _PRESETS, "tests/unit/test_config_parts.py"
    ),
    "AlgorithmConfig.repeat_times": Fate(
        "rollouts per task (the group size)", _READER, "tests/integration/test_rft_loop.py"
    ),
    "AlgorithmConfig.advantage_fn": Fate(
        "ADVANTAGE_FN part", _PRESETS, "tests/unit/test_registry.py"
    ),
    "AlgorithmConfig.advantage_fn_args": Fate(
        "keyword args of the advantage fn, checked against its signature",
        _PRESETS,
        "tests/unit/test_registry.py",
    ),
    "AlgorithmConfig.policy_loss_fn": Fate(
        "POLICY_LOSS_FN part", _PRESETS, "tests/unit/test_registry.py"
    ),
    "AlgorithmConfig.policy_loss_fn_args": Fate(
        "keyword args of the policy loss (clip ranges, loss_agg_mode)",
        _PRESETS,
        "tests/unit/test_losses.py",
    ),
    "AlgorithmConfig.kl_penalty_fn": Fate(
        "KL estimator folded into rewards before advantages",
        _PRESETS,
        "tests/unit/test_trainer_kl_penalty.py",
    ),
    "AlgorithmConfig.kl_penalty_fn_args": Fate(
        "kl_coef of the reward penalty", _PRESETS, "tests/unit/test_trainer_kl_penalty.py"
    ),
    "AlgorithmConfig.kl_loss_fn": Fate(
        "KL_FN loss term against the base model", _PRESETS, "tests/unit/test_trainer_kl_penalty.py"
    ),
    "AlgorithmConfig.kl_loss_fn_args": Fate(
        "kl_coef and args of the KL loss", _PRESETS, "tests/unit/test_losses.py"
    ),
    "AlgorithmConfig.entropy_loss_fn": Fate(
        "ENTROPY_LOSS_FN term", _PRESETS, "tests/integration/test_rft_loop.py"
    ),
    "AlgorithmConfig.entropy_loss_fn_args": Fate(
        "entropy_coef", _PRESETS, "tests/unit/test_losses.py"
    ),
    "AlgorithmConfig.loss_agg_mode": Fate(
        "LOSS_AGG_MODES: how token losses become the batch loss",
        _PRESETS,
        "tests/unit/test_losses.py",
    ),
    "AlgorithmConfig.sample_strategy": Fate(
        "SAMPLE_STRATEGIES (default, staleness_control, mix): how the trainer forms batches",
        _STRATEGY,
        "tests/unit/test_samplers.py",
    ),
    "AlgorithmConfig.sample_strategy_args": Fate(
        "the strategy's args (max_staleness, expert_data_ratio, sft_dataset_name, "
        "filter_groups), checked at load",
        _STRATEGY,
        "tests/unit/test_samplers.py",
    ),
    "AlgorithmConfig.implementation": Fate(
        "verl: the advantage fn and policy loss become verl's core_algos (verl/<name>, same args)",
        _PRESETS,
        "tests/unit/test_verl_differential.py",
    ),
    # -- model
    "ModelConfig.model_path": Fate(
        "smollm2 (bundled GGUF), tiny, or a local HF directory",
        "rft/engines/models.py",
        "tests/integration/test_rft_loop.py",
    ),
    "ModelConfig.max_prompt_tokens": Fate(
        "longer prompts are truncated (last tokens kept) or refused",
        "rft/engines/prompt_limits.py",
        "tests/unit/test_prompt_limits.py",
    ),
    "ModelConfig.max_response_tokens": Fate(
        "default and bound of rollout max_tokens", _EXPLORER, "tests/unit/test_explorer_settings.py"
    ),
    "ModelConfig.max_model_len": Fate(
        "prompt + response tokens are clamped to it",
        "rft/engines/prompt_limits.py",
        "tests/unit/test_prompt_limits.py",
    ),
    "ModelConfig.min_response_tokens": Fate(
        "no eos before this many tokens", _EXPLORER, "tests/unit/test_explorer_settings.py"
    ),
    "ModelConfig.enable_prompt_truncation": Fate(
        "truncate (true) or refuse (false) over-long prompts",
        "rft/engines/prompt_limits.py",
        "tests/unit/test_explorer_settings.py",
    ),
    "ModelConfig.repetition_penalty": Fate(
        "applied to sampling; logprobs stay those of the raw distribution",
        "rft/engines/rollout.py",
        "tests/unit/test_engines_rollout.py",
    ),
    "ModelConfig.custom_chat_template": Fate(
        "Jinja template replacing the tokenizer's",
        "rft/engines/chat_template.py",
        "tests/unit/test_explorer_settings.py",
    ),
    "ModelConfig.chat_template_path": Fate(
        "file holding that template",
        "rft/engines/chat_template.py",
        "tests/unit/test_explorer_settings.py",
    ),
    "ModelConfig.dtype": Fate(
        "trained weights' dtype; auto = bf16 on GPU (fp32 master), fp32 on CPU",
        _PLAN,
        "tests/unit/test_run_plan.py",
    ),
    # -- cluster
    "ClusterConfig.node_num": Fate(
        "launcher ray: node_num × gpu_per_node GPUs size the placement group; "
        "launcher local: more than 1 warns that it starts processes on this machine only",
        "rft/supervisor/ray_placement.py",
        "tests/unit/test_ray_placement.py",
    ),
    "ClusterConfig.gpu_per_node": Fate(
        "GPU placement: rollout on the first GPUs, trainer on the next",
        _PLAN,
        "tests/unit/test_run_plan.py",
    ),
    "ClusterConfig.launcher": Fate(
        "LAUNCHERS part that starts the processes of `rft run`: local processes or Ray actors",
        "rft/supervisor/launchers.py",
        "tests/integration/test_ray_launcher.py",
    ),
    "ClusterConfig.device": Fate(
        "cpu: every process computes on the CPU, the GPUs only declared (to Ray's placement)",
        _PLAN,
        "tests/unit/test_run_plan.py",
    ),
    # -- buffer
    "BufferConfig.batch_size": Fate(
        "tasks per explorer step (derived from train_batch_size when absent)",
        _PLAN,
        "tests/unit/test_config_parts.py",
    ),
    "BufferConfig.train_batch_size": Fate(
        "experiences per train step", _PLAN, "tests/unit/test_config_parts.py"
    ),
    "BufferConfig.total_epochs": Fate(
        "epochs published; the step count when total_steps is unset",
        _PLAN,
        "tests/unit/test_config_effects.py",
    ),
    "BufferConfig.total_steps": Fate(
        "explorer and trainer steps of the run (rft train --from-topic: a cap on its steps)",
        _PLAN,
        "tests/integration/test_rft_loop.py",
    ),
    "ExplorerInputConfig.default_workflow_type": Fate(
        "workflow of tasksets that name none", _DERIVED, "tests/unit/test_config_parts.py"
    ),
    "ExplorerInputConfig.default_eval_workflow_type": Fate(
        "workflow of eval tasksets that name none", _DERIVED, "tests/unit/test_config_effects.py"
    ),
    "ExplorerInputConfig.default_reward_fn_type": Fate(
        "reward fn of tasksets that name none", _DERIVED, "tests/unit/test_config_parts.py"
    ),
    # -- a taskset
    "TasksetConfig.name": Fate(
        "taskset name in task ids and eval metrics", _READER, "tests/unit/test_taskset_publisher.py"
    ),
    "TasksetConfig.path": Fate(
        "file, dataset folder or generator name", _READER, "tests/unit/test_taskset_readers.py"
    ),
    "TasksetConfig.storage_type": Fate(
        "file or generator (TASKSET_SOURCES)", _READER, "tests/unit/test_taskset_readers.py"
    ),
    "TasksetConfig.split": Fate(
        "split read from a dataset folder",
        "rft/datasets/hf_dataset_reader.py",
        "tests/unit/test_taskset_readers.py",
    ),
    "TasksetConfig.subset_name": Fate(
        "subset folder of a dataset repo",
        "rft/datasets/hf_dataset_reader.py",
        "tests/unit/test_taskset_readers.py",
    ),
    "TasksetConfig.repeat_times": Fate(
        "rollouts per task of this taskset", _READER, "tests/integration/test_rft_loop.py"
    ),
    "TasksetConfig.default_workflow_type": Fate(
        "WORKFLOWS part building prompts and scoring", _READER, "tests/unit/test_config_parts.py"
    ),
    "TasksetConfig.default_reward_fn_type": Fate(
        "REWARD_FUNCTIONS part", _READER, "tests/unit/test_config_parts.py"
    ),
    "TasksetConfig.workflow_args": Fate(
        "carried to the workflow in the task's format map", _READER, "tests/unit/test_workflows.py"
    ),
    "TasksetConfig.reward_fn_args": Fate(
        "keyword args of the reward fn", _WORKFLOW, "tests/unit/test_workflows.py"
    ),
    "TasksetConfig.generator_args": Fate(
        "keyword args of the generator, checked at load", _READER, "tests/unit/test_config_parts.py"
    ),
    "TaskSelectorConfig.selector_type": Fate(
        "TASK_SELECTORS: order of tasks per epoch",
        _READER,
        "tests/unit/test_taskset_publisher.py",
    ),
    "TaskSelectorConfig.feature_keys": Fate(
        "numeric row columns a selector reads (offline_easy2hard's order, difficulty_based's prior)",
        _READER,
        "tests/unit/test_task_selectors.py",
    ),
    "TaskSelectorConfig.kwargs": Fate(
        "keyword args of the selector, checked at load", _READER, "tests/unit/test_config_parts.py"
    ),
    "FormatConfig.prompt_type": Fate(
        "plaintext or messages rows", _WORKFLOW, "tests/unit/test_workflows.py"
    ),
    "FormatConfig.prompt_key": Fate(
        "row field of the prompt", _WORKFLOW, "tests/unit/test_workflows.py"
    ),
    "FormatConfig.response_key": Fate(
        "row field of the answer the reward reads", _WORKFLOW, "tests/unit/test_workflows.py"
    ),
    "FormatConfig.system_prompt": Fate("system message", _WORKFLOW, "tests/unit/test_workflows.py"),
    "FormatConfig.system_prompt_key": Fate(
        "row field of the system message", _WORKFLOW, "tests/unit/test_workflows.py"
    ),
    "FormatConfig.messages_key": Fate(
        "row field of a chat (prompt_type messages)", _WORKFLOW, "tests/unit/test_workflows.py"
    ),
    "FormatConfig.reply_prefix": Fate(
        "text the reply is forced to start with", _WORKFLOW, "tests/unit/test_workflows.py"
    ),
    "FormatConfig.chat_template": Fate(
        "this taskset's chat template", "rft/workflows/runner.py", "tests/unit/test_step_runner.py"
    ),
    "RolloutArgs.temperature": Fate(
        "sampling temperature; the trainer recomputes logprobs at it",
        "rft/engines/rollout.py",
        "tests/unit/test_trainer_temperature.py",
    ),
    "RolloutArgs.top_p": Fate(
        "nucleus sampling", "rft/engines/rollout.py", "tests/unit/test_engines_rollout.py"
    ),
    "RolloutArgs.top_k": Fate(
        "top-k sampling", "rft/workflows/runner.py", "tests/unit/test_workflows.py"
    ),
    "RolloutArgs.max_tokens": Fate(
        "response length limit", "rft/engines/prompt_limits.py", "tests/unit/test_prompt_limits.py"
    ),
    "RolloutArgs.logprobs": Fate(
        "accepted for Trinity; the engine always reports sampled-token logprobs",
        "rft/workflows/runner.py",
        "tests/unit/test_workflows.py",
    ),
    "TrainerInputConfig.max_staleness": Fate(
        "alias of sample_strategy_args.max_staleness (selects staleness_control over default); "
        "rft train --from-topic sets both aside with a warning (consumers/offline_input.py)",
        _STRATEGY,
        "tests/unit/test_config_effects.py",
    ),
    "AuxiliaryBufferConfig.path": Fate(
        "the demonstrations of `mix`: a dataset file or directory, or a topic",
        _EXPERT,
        "tests/unit/test_mix_sampler.py",
    ),
    "AuxiliaryBufferConfig.name": Fate(
        "names the source in demonstration ids (default: its key)",
        _EXPERT,
        "tests/unit/test_mix_sampler.py",
    ),
    "AuxiliaryBufferConfig.storage_type": Fate(
        "EXPERT_SOURCES: file (dataset rows) or kafka/queue (Experience events)",
        _EXPERT,
        "tests/unit/test_mix_sampler.py",
    ),
    "AuxiliaryBufferConfig.split": Fate(
        "the split of a dataset directory", _EXPERT, "tests/unit/test_mix_sampler.py"
    ),
    "AuxiliaryBufferConfig.subset_name": Fate(
        "the subset of a dataset directory", _EXPERT, "tests/unit/test_mix_sampler.py"
    ),
    "ExperienceBufferConfig.name": Fate(
        "table name of the sql mirror",
        "consumers/experience_mirror.py",
        "tests/unit/test_experience_mirror.py",
    ),
    "ExperienceBufferConfig.storage_type": Fate(
        "kafka/queue: the topic; sql: the topic plus a SQL mirror",
        "consumers/experience_mirror.py",
        "tests/unit/test_config_loading.py",
    ),
    "ExperienceBufferConfig.path": Fate(
        "kafka: a topic name (checked); sql: the mirror's SQLAlchemy URL",
        "consumers/experience_mirror.py",
        "tests/unit/test_config_loading.py",
    ),
    "ExperienceBufferConfig.max_read_timeout": Fate(
        "the trainer stops after this long without experiences",
        _TRAINER,
        "tests/integration/test_trainer_resume.py",
    ),
    "ExperienceBufferConfig.capacity": Fate(
        "experiences the replay buffer holds; the lowest priority is evicted",
        _REPLAY,
        "tests/unit/test_replay_buffer.py",
    ),
    "ReplayBufferConfig.enable": Fate(
        "complete groups wait in the priority replay buffer instead of the FIFO pool",
        _REPLAY,
        "tests/integration/test_trainer_replay.py",
    ),
    "ReplayBufferConfig.reuse_cooldown_time": Fate(
        "seconds before a trained group may be trained again (None: once)",
        _REPLAY,
        "tests/unit/test_replay_buffer.py",
    ),
    "ReplayBufferConfig.priority_fn": Fate(
        "PRIORITY_FNS: linear_decay, linear_decay_use_count_control_randomization",
        _REPLAY,
        "tests/unit/test_priority_fns.py",
    ),
    "ReplayBufferConfig.priority_fn_args": Fate(
        "decay, use_count_limit, sigma; checked at load",
        _REPLAY,
        "tests/unit/test_priority_fns.py",
    ),
    # -- explorer
    "ExplorerConfig.name": Fate(
        "the explorer's consumer group: same name shares tasks, a new one copies the stream",
        _PLAN,
        "tests/unit/test_trinity_examples.py",
    ),
    "ExplorerConfig.runner_per_model": Fate(
        "tasks per engine call", "rft/workflows/step_runner.py", "tests/unit/test_step_runner.py"
    ),
    "ExplorerConfig.runner_num": Fate(
        "Trinity's total: runner_per_model = runner_num / engine_num",
        _DERIVED,
        "tests/unit/test_config_parts.py",
    ),
    "ExplorerConfig.max_timeout": Fate(
        "per-task rollout deadline; retried, then dead-lettered",
        "rft/workflows/step_runner.py",
        "tests/unit/test_step_runner.py",
    ),
    "ExplorerConfig.max_retry_times": Fate(
        "retries of a failed or timed-out task",
        "rft/workflows/step_runner.py",
        "tests/unit/test_step_runner.py",
    ),
    "ExplorerConfig.env_vars": Fate(
        "set in the explorer process before torch starts",
        "consumers/explorer_env.py",
        "tests/unit/test_explorer_settings.py",
    ),
    "ExplorerConfig.eval_interval": Fate(
        "explorer steps between evaluations", _EXPLORER, "tests/integration/test_rft_loop.py"
    ),
    "ExplorerConfig.eval_on_startup": Fate(
        "evaluate before the first step", _EXPLORER, "tests/integration/test_rft_loop.py"
    ),
    "ExplorerConfig.tasks_from": Fate(
        "where a new explorer group first reads the tasks: earliest, latest or a timestamp",
        _EXPLORER,
        "tests/integration/test_explorer_groups.py",
    ),
    "ExplorerConfig.experiences_to": Fate(
        "the explorer group's experience topic: the trainer's, its own (a shadow), or one named",
        _PLAN,
        "tests/integration/test_explorer_groups.py",
    ),
    "ExplorerConfig.max_explorers": Fate(
        "explorer processes a group is sized for: the tasks topic gets at least that many "
        "partitions",
        _PLAN,
        "tests/unit/test_explorer_groups_plan.py",
    ),
    "ExplorerConfig.bench_on_latest_checkpoint": Fate(
        "mode bench evaluates only the newest version",
        "consumers/bench.py",
        "tests/unit/test_bench.py",
    ),
    "RolloutModelConfig.engine_type": Fate(
        "ROLLOUT_ENGINES part", _EXPLORER, "tests/unit/test_config_parts.py"
    ),
    "RolloutModelConfig.engine_num": Fate(
        "GPUs reserved for rollout before the trainer's", _PLAN, "tests/unit/test_run_plan.py"
    ),
    "RolloutModelConfig.tensor_parallel_size": Fate(
        "multiplies the rollout GPUs reserved", _PLAN, "tests/unit/test_run_plan.py"
    ),
    "RolloutModelConfig.seed": Fate(
        "sampling seed per step, publish shuffle seed, tiny model init",
        _EXPLORER,
        "tests/integration/test_rft_loop.py",
    ),
    "RolloutModelConfig.dtype": Fate(
        "rollout dtype, and so the dtype versions are published in",
        _PLAN,
        "tests/unit/test_run_plan.py",
    ),
    "RolloutModelConfig.enable_thinking": Fate(
        "passed to the chat template", _EXPLORER, "tests/unit/test_explorer_settings.py"
    ),
    "RolloutModelConfig.gpu_memory_utilization": Fate(
        "the vllm engine's share of GPU memory", _ROLLOUT, "tests/unit/test_vllm_engine.py"
    ),
    "RolloutModelConfig.enforce_eager": Fate(
        "vllm: no CUDA graphs; hf: no static-cache + torch.compile path on a GPU",
        _ROLLOUT,
        "tests/unit/test_vllm_engine.py",
    ),
    "RolloutModelConfig.enable_prefix_caching": Fate(
        "vllm: KV blocks of shared prompt prefixes reused",
        _ROLLOUT,
        "tests/unit/test_vllm_engine.py",
    ),
    "RolloutModelConfig.engine_args": Fate(
        "the engine's own settings, keys its entry reads (`args`); others refused at load",
        _PARTS,
        "tests/unit/test_config_parts.py",
    ),
    "RolloutModelConfig.max_model_len": Fate(
        "alias of model.max_model_len (a different value refused); the vllm engine's bound",
        _DERIVED,
        "tests/unit/test_vllm_engine.py",
    ),
    # -- trainer
    "TrainerConfig.name": Fate(
        "the trainer's consumer group", _PLAN, "tests/unit/test_config_effects.py"
    ),
    "TrainerConfig.trainer_type": Fate(
        "TRAINER_ENGINES part: torch (one process) or fsdp2 (N ranks); verl reads as fsdp2, "
        "with a warning",
        _TRAINER,
        "tests/unit/test_trainer_engines.py",
    ),
    "TrainerConfig.trainer_strategy": Fate(
        "fsdp2 (fsdp reads as fsdp2) turns the torch engine into the fsdp2 engine; megatron is "
        "refused",
        _TRAINER,
        "tests/unit/test_trainer_engines.py",
    ),
    "TrainerConfig.world_size": Fate(
        "ranks of the fsdp2 engine (default: the GPUs left after rollout, 1 on the CPU)",
        _PLAN,
        "tests/unit/test_trainer_engines.py",
    ),
    "TrainerConfig.save_interval": Fate(
        "steps between versions that carry optimizer state",
        "consumers/trainer_checkpoint.py",
        "tests/unit/test_trainer_checkpoint.py",
    ),
    "TrainerConfig.grad_clip": Fate(
        "gradient norm clip", _TRAINER, "tests/unit/test_engines_trainer.py"
    ),
    "TrainerConfig.total_steps": Fate(
        "train steps (default buffer.total_steps)",
        _PLAN,
        "tests/integration/test_trainer_resume.py",
    ),
    "TrainerConfig.micro_batch_size": Fate(
        "sequences per forward pass (gradient accumulation)",
        _TRAINER,
        "tests/unit/test_engines_trainer.py",
    ),
    "TrainerConfig.max_checkpoints_to_keep": Fate(
        "older versions are pruned after each publish, except those live explorers report loaded",
        _TRAINER,
        "tests/integration/test_trainer_resume.py",
    ),
    "OptimizerConfig.lr": Fate(
        "AdamW learning rate", _TRAINER, "tests/unit/test_engines_trainer.py"
    ),
    "OptimizerConfig.betas": Fate(
        "AdamW betas (two numbers)", _TRAINER, "tests/unit/test_config_parts.py"
    ),
    "OptimizerConfig.weight_decay": Fate(
        "AdamW weight decay", _TRAINER, "tests/unit/test_engines_trainer.py"
    ),
    "OptimizerConfig.lr_warmup_steps": Fate(
        "linear warmup steps", _TRAINER, "tests/unit/test_config_effects.py"
    ),
    "OptimizerConfig.lr_warmup_steps_ratio": Fate(
        "warmup as a share of total steps when lr_warmup_steps is 0",
        _TRAINER,
        "tests/unit/test_config_effects.py",
    ),
    "OptimizerConfig.warmup_style": Fate(
        "LR_SCHEDULES: constant, cosine, linear", _TRAINER, "tests/unit/test_lr_schedules.py"
    ),
    "OptimizerConfig.min_lr_ratio": Fate(
        "floor of the cosine / linear decay", _TRAINER, "tests/unit/test_lr_schedules.py"
    ),
    # -- synchronizer
    "SynchronizerConfig.sync_method": Fate(
        "checkpoint, the one method: versions through the object store (nccl/memory read as it)",
        "rft/config/schema.py",
        "tests/unit/test_config_validation.py",
    ),
    "SynchronizerConfig.sync_style": Fate(
        "SYNC_STYLES: when explorers wait for and request versions",
        _EXPLORER,
        "tests/integration/test_rft_loop.py",
    ),
    "SynchronizerConfig.sync_interval": Fate(
        "train steps between versions", _TRAINER, "tests/integration/test_rft_loop.py"
    ),
    "SynchronizerConfig.sync_offset": Fate(
        "explorer steps ahead of the trainer under fixed",
        _EXPLORER,
        "tests/integration/test_rft_loop.py",
    ),
    "SynchronizerConfig.sync_timeout": Fate(
        "how long an explorer waits for a version before on_sync_timeout applies",
        _EXPLORER_SYNC,
        "tests/integration/test_explorer_sync.py",
    ),
    "SynchronizerConfig.on_sync_timeout": Fate(
        "wait (warn, count sync_timeouts_total) or stop with an error; never older weights",
        _EXPLORER_SYNC,
        "tests/integration/test_explorer_sync.py",
    ),
    "SynchronizerConfig.max_head_offpolicyness": Fate(
        "η: explorer step s waits for version >= s-1-η (checked against sync_interval at load)",
        _EXPLORER_SYNC,
        "tests/integration/test_sync_admission.py",
    ),
    # -- monitor
    "MonitorConfig.monitor_type": Fate(
        "METRIC_SINKS: console, jsonl, sql, tensorboard, wandb, mlflow",
        _SINKS,
        "tests/unit/test_metric_sinks.py",
    ),
    "MonitorConfig.monitor_args": Fate(
        "settings per sink", _SINKS, "tests/unit/test_metric_sinks.py"
    ),
    "MonitorConfig.trace_exporter": Fate(
        "SPAN_EXPORTERS: none, console, file, otlp (default: RFT_TRACE_EXPORTER, else none)",
        "rft/tracing/setup.py",
        "tests/unit/test_trace_exporters.py",
    ),
    "MonitorConfig.trace_args": Fate(
        "exporter settings (file: path; otlp: protocol, endpoint, headers, timeout, insecure)",
        "rft/tracing/setup.py",
        "tests/unit/test_trace_exporters.py",
    ),
    "MonitorConfig.trace_content": Fate(
        "prompt and response text on the explorer.rollout spans (off: ids and sizes only)",
        "rft/workflows/rollout_spans.py",
        "tests/unit/test_rollout_spans.py",
    ),
    # -- stack
    "KafkaSettings.bootstrap_servers": Fate(
        "Kafka endpoint",
        "rft/events/kafka_confluent.py",
        "tests/integration/test_transport_contract.py",
    ),
    "KafkaSettings.client": Fate(
        "KAFKA_BACKENDS: confluent or kafka-python",
        "rft/events/transport.py",
        "tests/integration/test_transport_contract.py",
    ),
    "KafkaSettings.partitions": Fate(
        "partitions of the run's topics", "rft/events/topics.py", "tests/unit/test_topics.py"
    ),
    "KafkaSettings.replication_factor": Fate(
        "replication of the run's topics", "rft/events/topics.py", "tests/unit/test_topics.py"
    ),
    "KafkaSettings.retention_ms": Fate(
        "retention of the run's topics (-1: forever)",
        "rft/events/topics.py",
        "tests/unit/test_topics.py",
    ),
    "KafkaSettings.schema_registry_url": Fate(
        "refused: the event plane does not use a registry yet",
        _DERIVED,
        "tests/unit/test_config_effects.py",
    ),
    "KafkaSettings.outage_timeout": Fate(
        "seconds every component rides out a Kafka outage (retries with backoff, one log line as "
        "it starts and one as it ends) before exiting non-zero with the address",
        "rft/events/transport.py",
        "tests/faults/test_outages.py",
    ),
    "KafkaSettings.extra": Fate(
        "client settings passed through",
        "rft/events/kafka_confluent.py",
        "tests/unit/test_config_effects.py",
    ),
    "ObjectStoreSettings.endpoint": Fate(
        "S3 endpoint of checkpoints",
        "rft/storage/s3_object_store.py",
        "tests/faults/test_checkpoint_crash.py",
    ),
    "ObjectStoreSettings.access_key": Fate(
        "S3 access key",
        "rft/storage/s3_object_store.py",
        "tests/integration/test_object_store_settings.py",
    ),
    "ObjectStoreSettings.secret_key": Fate(
        "S3 secret key (never printed)",
        "rft/storage/s3_object_store.py",
        "tests/unit/test_config_loading.py",
    ),
    "ObjectStoreSettings.bucket": Fate(
        "bucket of checkpoints",
        "rft/storage/s3_object_store.py",
        "tests/integration/test_storage_contract.py",
    ),
    "ObjectStoreSettings.secure": Fate(
        "https to the endpoint",
        "rft/storage/s3_object_store.py",
        "tests/unit/test_object_store_uri.py",
    ),
    "ObjectStoreSettings.region": Fate(
        "S3 region handed to the client",
        "rft/storage/s3_object_store.py",
        "tests/integration/test_object_store_settings.py",
    ),
    "ObjectStoreSettings.uri": Fate(
        "s3:// or file:// location of checkpoints instead of the bucket",
        _PLAN,
        "tests/unit/test_object_store_uri.py",
    ),
    "ObjectStoreSettings.outage_timeout": Fate(
        "seconds an object store outage is ridden out (uploads resent whole, downloads resumed; "
        "one log line as it starts and one as it ends) before exiting with the endpoint",
        "rft/storage/s3_object_store.py",
        "tests/faults/test_outages.py",
    ),
    "LocalStackSettings.root": Fate(
        "data root of the local stack",
        "rft/stack/local_stack.py",
        "tests/integration/test_stack.py",
    ),
    "LocalStackSettings.kafka_port": Fate(
        "local Kafka port", "rft/stack/local_stack.py", "tests/integration/test_stack.py"
    ),
    "LocalStackSettings.kafka_controller_port": Fate(
        "local KRaft controller port", "rft/stack/local_stack.py", "tests/integration/test_stack.py"
    ),
    "LocalStackSettings.minio_port": Fate(
        "local MinIO port", "rft/stack/local_stack.py", "tests/integration/test_stack.py"
    ),
    "LocalStackSettings.minio_console_port": Fate(
        "local MinIO console port", "rft/stack/local_stack.py", "tests/integration/test_stack.py"
    ),
    "LocalStackSettings.auto_start": Fate(
        "rft run starts the local stack when the endpoints are local",
        "rft/supervisor/run_supervisor.py",
        "tests/unit/test_config_effects.py",
    ),
}


def config_fields() -> Iterator[tuple[str, str]]:
    """(`Section.field`, an example dotted key path) for every leaf field of the config."""
    from rft.config.schema import RftConfig

    yield from _walk(RftConfig, "", set())


def _walk(cls: type[Any], prefix: str, seen: set[str]) -> Iterator[tuple[str, str]]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}.{f.name}" if prefix else f.name
        section = _section_type(hints[f.name])
        if section is not None:
            yield from _walk(section, path, seen)
            continue
        key = f"{cls.__name__}.{f.name}"
        if key not in seen:
            seen.add(key)
            yield key, path


def _section_type(hint: Any) -> type[Any] | None:
    if dataclasses.is_dataclass(hint):
        return hint  # type: ignore[return-value]
    for arg in typing.get_args(hint):
        found = _section_type(arg)
        if found is not None:
            return found
    return None


def implemented_keys() -> list[tuple[str, Fate]]:
    """(example key path, fate) for every field, in config order."""
    return [(path, KEY_FATES[key]) for key, path in config_fields() if key in KEY_FATES]


def ignored_keys() -> list[tuple[str, str]]:
    """(example key path, the warning's reason) for every key rft accepts without acting on."""
    from rft.config.schema import RftConfig

    out: list[tuple[str, str]] = []
    _ignored(RftConfig, "", out, set())
    return out


def _ignored(cls: type[Any], prefix: str, out: list[tuple[str, str]], seen: set[str]) -> None:
    if cls.__name__ in seen:
        return
    seen.add(cls.__name__)
    for key, reason in getattr(cls, "IGNORED_KEYS", {}).items():
        out.append((f"{prefix}.{key}" if prefix else key, reason))
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        section = _section_type(hints[f.name])
        if section is not None:
            _ignored(section, f"{prefix}.{f.name}" if prefix else f.name, out, seen)
