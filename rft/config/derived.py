"""Derived defaults and cross-key checks of a bound RftConfig, done in this one place.

`fill_derived` fills every value that defaults to another key (train_batch_size, max_model_len,
taskset repeat_times and workflow types...). Algorithm parts left unset stay None: the preset of
`algorithm_type` (rft.algorithms, `resolve_algorithm`) supplies them and checks repeat_times.
`check_consistency` returns the issues that involve more than one key, and `value_notices` the
values that load but do less than a reader might expect (said as warnings, with what happens).
"""

from __future__ import annotations

import re

from rft.config.binding import Issue, Notice
from rft.config.schema import RftConfig, TasksetConfig
from rft.config.stream_start import parse_stream_start
from rft.errors import ConfigError

# Kafka's rule for topic names (kafka.common.internals.Topic): 1-249 of [a-zA-Z0-9._-]
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
# `dialect[+driver]://`, the start of a SQLAlchemy URL as SQLAlchemy matches it; the config imports
# no other part, so the rest is read when the mirror opens the database (rft.storage.sql_database)
_SQL_URL = re.compile(r"[\w+]+://")


def fill_derived(cfg: RftConfig) -> None:
    """Fill values that default to other keys, in place."""
    algo = cfg.algorithm
    model = cfg.model
    rollout_len = cfg.explorer.rollout_model.max_model_len
    if model.max_model_len is None:
        model.max_model_len = rollout_len or model.max_prompt_tokens + model.max_response_tokens
    if rollout_len is None:
        cfg.explorer.rollout_model.max_model_len = model.max_model_len

    buffer = cfg.buffer
    # Trinity's trainer-only configs give train_batch_size alone: tasks per step follow from it
    if (
        buffer.batch_size is None
        and buffer.train_batch_size is not None
        and buffer.train_batch_size % algo.repeat_times == 0
    ):
        buffer.batch_size = buffer.train_batch_size // algo.repeat_times
    if buffer.train_batch_size is None and buffer.batch_size is not None:
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

    for key, aux in buffer.trainer_input.auxiliary_buffers.items():
        if not aux.name:
            aux.name = key
    for i, model_aux in enumerate(cfg.explorer.auxiliary_models):
        if model_aux.name is None:  # Trinity's workflows reach them by position
            model_aux.name = str(i)

    rollout = cfg.explorer.rollout_model
    if rollout.dtype is None:
        rollout.dtype = model.dtype
    explorer = cfg.explorer
    if explorer.runner_num is None:
        explorer.runner_num = rollout.engine_num * explorer.runner_per_model
    else:  # Trinity's older total over all engines: tasks in flight per engine follow from it
        explorer.runner_per_model = max(1, explorer.runner_num // rollout.engine_num)


def trainer_gpus(cfg: RftConfig) -> int:
    """GPUs of the node left to the trainer after the rollout engines' (0: it shares cuda:0)."""
    rollout = cfg.explorer.rollout_model
    return max(0, cfg.cluster.gpu_per_node - rollout.engine_num * rollout.tensor_parallel_size)


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

    buffer = cfg.buffer
    if buffer.batch_size is None:
        if buffer.train_batch_size is None:
            issues.append(
                Issue("buffer.batch_size", "is required (or buffer.train_batch_size) (an integer)")
            )
        else:
            issues.append(
                Issue(
                    "buffer.train_batch_size",
                    f"{buffer.train_batch_size} is not a multiple of algorithm.repeat_times "
                    f"({algo.repeat_times}); set buffer.batch_size (tasks per step) as well",
                )
            )
    issues += _experience_buffer_issues(cfg)
    issues += _trainer_input_issues(cfg)
    issues += _explorer_stream_issues(cfg)
    issues += _auxiliary_model_issues(cfg)
    issues += _lora_issues(cfg)
    issues += _memory_issues(cfg)

    model = cfg.model
    assert model.max_model_len is not None  # filled by fill_derived
    rollout = cfg.explorer.rollout_model
    if rollout.max_model_len != model.max_model_len:
        issues.append(
            Issue(
                "explorer.rollout_model.max_model_len",
                f"{rollout.max_model_len} differs from model.max_model_len "
                f"({model.max_model_len}); rollouts and training share one bound: set one of them",
            )
        )
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

    if cfg.stack.kafka.schema_registry_url is not None:
        issues.append(
            Issue(
                "stack.kafka.schema_registry_url",
                "the event plane does not use a schema registry yet: events carry Avro "
                "single-object encoding with the schema fingerprint; remove this key",
            )
        )
    for section in ("kafka", "object_store"):
        outage_timeout = getattr(cfg.stack, section).outage_timeout
        if not outage_timeout > 0:
            issues.append(
                Issue(
                    f"stack.{section}.outage_timeout",
                    f"must be > 0 seconds (how long an outage is ridden out), got {outage_timeout}",
                )
            )
    betas = cfg.trainer.optim.betas
    if len(betas) != 2:
        issues.append(
            Issue("trainer.optim.betas", f"needs two numbers (beta1, beta2), got {betas}")
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

    return issues


def _trainer_input_issues(cfg: RftConfig) -> list[Issue]:
    """The replay buffer must hold a batch; the staleness alias must agree with the strategy's."""
    issues = []
    inputs = cfg.buffer.trainer_input
    buf = inputs.experience_buffer
    batch = cfg.buffer.train_batch_size
    if buf.replay_buffer.enable and batch is not None and buf.capacity < batch:
        issues.append(
            Issue(
                "buffer.trainer_input.experience_buffer.capacity",
                f"{buf.capacity} is smaller than buffer.train_batch_size ({batch}): with "
                "replay_buffer.enable the buffer must hold at least one batch",
            )
        )
    strategy_bound = cfg.algorithm.sample_strategy_args.get("max_staleness")
    if (
        inputs.max_staleness is not None
        and strategy_bound is not None
        and strategy_bound != inputs.max_staleness
    ):
        issues.append(
            Issue(
                "buffer.trainer_input.max_staleness",
                f"{inputs.max_staleness} disagrees with algorithm.sample_strategy_args."
                f"max_staleness ({strategy_bound}); it is an alias of that key: set one",
            )
        )
    return issues


def _experience_buffer_issues(cfg: RftConfig) -> list[Issue]:
    """A kafka `path` must be a legal topic name; a sql one a SQLAlchemy URL; never a mix-up."""
    buf = cfg.buffer.trainer_input.experience_buffer
    where = "buffer.trainer_input.experience_buffer"
    if buf.storage_type == "kafka" and buf.path is not None and not _TOPIC_NAME.fullmatch(buf.path):
        hint = " (a SQL URL? set storage_type: sql)" if "://" in buf.path else ""
        return [
            Issue(
                f"{where}.path",
                f"{buf.path!r} is not a legal Kafka topic name (1-249 of a-z A-Z 0-9 . _ -){hint}",
            )
        ]
    if buf.storage_type == "sql" and buf.path and not _SQL_URL.match(buf.path):
        return [
            Issue(
                f"{where}.path",
                f"{buf.path!r} is not a SQLAlchemy URL (dialect[+driver]://..., "
                "e.g. sqlite:///experiences.db)",
            )
        ]
    return []


_NAME_PART = re.compile(r"[A-Za-z0-9_-]+")
OWN_EXPERIENCES = "own"
TRAINER_EXPERIENCES = "trainer"


def _memory_issues(cfg: RftConfig) -> list[Issue]:
    """The token budget named twice must be one number."""
    trainer = cfg.trainer
    a, b = trainer.max_token_len_per_gpu, trainer.ppo_max_token_len_per_gpu
    if a is not None and b is not None and a != b:
        return [
            Issue(
                "trainer.ppo_max_token_len_per_gpu",
                f"{b} differs from trainer.max_token_len_per_gpu {a}: they name one budget",
            )
        ]
    return []


def _lora_issues(cfg: RftConfig) -> list[Issue]:
    """model.lora_configs: one adapter per run, trained from zero."""
    entries = cfg.model.lora_configs
    issues = []
    if len(entries) > 1:
        issues.append(
            Issue(
                "model.lora_configs",
                f"{len(entries)} adapters: a run trains one (each version carries it)",
            )
        )
    for i, entry in enumerate(entries):
        if entry.path is not None:
            issues.append(
                Issue(
                    f"model.lora_configs[{i}].path",
                    "is refused: an adapter trains from zero (version 0 is the base model); "
                    "starting from a saved adapter is not supported",
                )
            )
    return issues


def _auxiliary_model_issues(cfg: RftConfig) -> list[Issue]:
    """Each auxiliary model's name is non-empty and its own: workflows and rewards reach them by it."""
    issues = []
    seen: dict[str, int] = {}
    for i, aux in enumerate(cfg.explorer.auxiliary_models):
        at = f"explorer.auxiliary_models[{i}].name"
        name = aux.name or ""
        if not name.strip():
            issues.append(Issue(at, "must not be empty"))
        elif name in seen:
            issues.append(
                Issue(at, f"{name!r} is taken by explorer.auxiliary_models[{seen[name]}]")
            )
        else:
            seen[name] = i
    return issues


def own_experience_topic(project: str, name: str, explorer_name: str) -> str:
    """The topic of an explorer group with `experiences_to: own`: the trainer never reads it."""
    return f"{project}.{name}.experiences.{explorer_name}"


def _explorer_stream_issues(cfg: RftConfig) -> list[Issue]:
    """`explorer.tasks_from` names a start; `explorer.experiences_to` a topic the explorer may
    write."""
    ex = cfg.explorer
    issues: list[Issue] = []
    try:
        parse_stream_start(ex.tasks_from)
    except ConfigError as exc:
        issues.append(Issue("explorer.tasks_from", str(exc).split(": ", 1)[-1]))
    target = ex.experiences_to
    if target == OWN_EXPERIENCES:
        if not _NAME_PART.fullmatch(ex.name):
            issues.append(
                Issue(
                    "explorer.name",
                    f"{ex.name!r} cannot end a topic name (experiences_to: own); use letters, "
                    "digits, '_' and '-'",
                )
            )
        elif not _TOPIC_NAME.fullmatch(own_experience_topic(cfg.project, cfg.name, ex.name)):
            issues.append(Issue("explorer.experiences_to", "own: the topic name is too long"))
    elif target != TRAINER_EXPERIENCES and not _TOPIC_NAME.fullmatch(target):
        issues.append(
            Issue(
                "explorer.experiences_to",
                f"{target!r} is neither trainer, own, nor a legal Kafka topic name "
                "(1-249 of a-z A-Z 0-9 . _ -)",
            )
        )
    return issues


def value_notices(cfg: RftConfig) -> list[Notice]:
    """Values that load and run but do less than their name suggests, each with what happens."""
    notices = []
    buf = cfg.buffer.trainer_input.experience_buffer
    if buf.storage_type == "queue" and buf.path:
        notices.append(
            Notice(
                "buffer.trainer_input.experience_buffer.path",
                f"`{buf.path}` is not used with storage_type queue: experiences flow through "
                "the run's Kafka topic; storage_type sql would also mirror them into that database",
            )
        )
    # η against max_staleness: rft.config.run_length (it refuses what would drop batches)
    target = cfg.explorer.experiences_to
    trainer_topic = buf.topic or f"{cfg.project}.{cfg.name}.experiences"
    if cfg.mode == "both" and target not in (TRAINER_EXPERIENCES, trainer_topic):
        notices.append(
            Notice(
                "explorer.experiences_to",
                f"{target!r} in mode both: `rft run` would start a trainer that this explorer "
                "never feeds; a shadow explorer is meant for `rft explore` (or mode: explore) "
                "beside a run",
            )
        )
    return notices
