"""Derived defaults and cross-key checks of a bound RftConfig, done in this one place.

`fill_derived` fills every value that defaults to another key (train_batch_size, max_model_len,
taskset repeat_times and workflow types...). Algorithm parts left unset stay None: the preset of
`algorithm_type` (rft.algorithms, `resolve_algorithm`) supplies them and checks repeat_times.
`check_consistency` returns the issues that involve more than one key.
"""

from __future__ import annotations

from rft.config.binding import Issue
from rft.config.schema import RftConfig, TasksetConfig


def fill_derived(cfg: RftConfig) -> None:
    """Fill values that default to other keys, in place."""
    algo = cfg.algorithm
    model = cfg.model
    if model.max_model_len is None:
        model.max_model_len = model.max_prompt_tokens + model.max_response_tokens

    buffer = cfg.buffer
    if buffer.train_batch_size is None:
        buffer.train_batch_size = buffer.batch_size * algo.repeat_times
    if cfg.trainer.total_steps is None:
        cfg.trainer.total_steps = buffer.total_steps

    inputs = buffer.explorer_input
    if inputs.taskset is not None:
        _fill_taskset(
            inputs.taskset,
            repeat_times=algo.repeat_times,
            workflow=inputs.default_workflow_type,
            reward=inputs.default_reward_fn_type,
            max_tokens=model.max_response_tokens,
        )
    for taskset in inputs.eval_tasksets:
        _fill_taskset(
            taskset,
            repeat_times=1,
            workflow=inputs.default_eval_workflow_type or inputs.default_workflow_type,
            reward=inputs.default_reward_fn_type,
            max_tokens=model.max_response_tokens,
        )

    rollout = cfg.explorer.rollout_model
    if rollout.dtype is None:
        rollout.dtype = model.dtype
    if cfg.explorer.runner_num is None:
        cfg.explorer.runner_num = rollout.engine_num * cfg.explorer.runner_per_model


def _fill_taskset(
    taskset: TasksetConfig,
    *,
    repeat_times: int,
    workflow: str | None,
    reward: str | None,
    max_tokens: int,
) -> None:
    if taskset.repeat_times is None:
        taskset.repeat_times = repeat_times
    if taskset.default_workflow_type is None:
        taskset.default_workflow_type = workflow
    if taskset.default_reward_fn_type is None:
        taskset.default_reward_fn_type = reward
    if taskset.rollout_args.max_tokens is None:
        taskset.rollout_args.max_tokens = max_tokens


def check_consistency(cfg: RftConfig) -> list[Issue]:
    """Issues that involve several keys of a config whose derived values are filled."""
    issues: list[Issue] = []
    algo = cfg.algorithm
    if not algo.algorithm_type:
        issues.append(Issue("algorithm.algorithm_type", "must not be empty"))

    model = cfg.model
    assert model.max_model_len is not None  # filled by fill_derived
    for key in ("max_prompt_tokens", "max_response_tokens"):
        value = getattr(model, key)
        if value > model.max_model_len:
            issues.append(
                Issue(
                    f"model.{key}",
                    f"{value} exceeds model.max_model_len ({model.max_model_len})",
                )
            )
    if model.min_response_tokens > model.max_response_tokens:
        issues.append(
            Issue(
                "model.min_response_tokens",
                f"{model.min_response_tokens} exceeds model.max_response_tokens "
                f"({model.max_response_tokens})",
            )
        )

    inputs = cfg.buffer.explorer_input
    if cfg.mode in ("both", "explore") and inputs.taskset is None:
        issues.append(
            Issue(
                "buffer.explorer_input.taskset",
                f"is required in mode {cfg.mode!r} (the tasks the explorer rolls out)",
            )
        )
    if cfg.mode == "bench" and not inputs.eval_tasksets:
        issues.append(
            Issue("buffer.explorer_input.eval_tasksets", "mode 'bench' needs at least one entry")
        )
    tasksets = [("buffer.explorer_input.taskset", inputs.taskset)] + [
        (f"buffer.explorer_input.eval_tasksets[{i}]", t) for i, t in enumerate(inputs.eval_tasksets)
    ]
    names: dict[str, str] = {}
    for path, taskset in tasksets:
        if taskset is None:
            continue
        if taskset.default_workflow_type is None and cfg.mode != "train":
            issues.append(
                Issue(
                    f"{path}.default_workflow_type",
                    "no workflow: set it here or buffer.explorer_input.default_workflow_type",
                )
            )
        max_tokens = taskset.rollout_args.max_tokens
        if max_tokens is not None and max_tokens > model.max_response_tokens:
            issues.append(
                Issue(
                    f"{path}.rollout_args.max_tokens",
                    f"{max_tokens} exceeds model.max_response_tokens ({model.max_response_tokens})",
                )
            )
        if taskset.name in names:
            issues.append(
                Issue(
                    f"{path}.name", f"{taskset.name!r} is already the name of {names[taskset.name]}"
                )
            )
        names[taskset.name] = path
        assert taskset.rollout_args.max_tokens is not None  # filled by fill_derived
        if taskset.rollout_args.max_tokens > model.max_model_len:
            issues.append(
                Issue(
                    f"{path}.rollout_args.max_tokens",
                    f"{taskset.rollout_args.max_tokens} exceeds model.max_model_len "
                    f"({model.max_model_len})",
                )
            )

    sync = cfg.synchronizer
    if sync.sync_method == "memory" and cfg.mode != "both":
        issues.append(
            Issue(
                "synchronizer.sync_method",
                f"'memory' needs explorer and trainer in one process (mode 'both'), "
                f"but mode is {cfg.mode!r}; use 'checkpoint'",
            )
        )
    rollout = cfg.explorer.rollout_model
    if rollout.engine_type == "openai" and not rollout.base_url:
        issues.append(
            Issue("explorer.rollout_model.base_url", "is required when engine_type is 'openai'")
        )
    return issues
