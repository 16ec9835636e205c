"""Load-time checks of every config value that names a registered part, against its registry.

A misspelt advantage fn, workflow or rollout engine must fail when the config loads, in the process
the user started, with the registry's close-match hint, not minutes later in a child process. Each
selected entry also says what it needs: its optional packages (with the install command) and its
own checks of the config (`Entry.issues`), and, for trainer engines, whether they run over ranks
(`many_ranks`: the default trainer.world_size and the rank rule follow from it). The registries'
modules are imported inside `check_parts` only (they import torch and transformers). Parts a user
registers in a module listed under `plugins` are imported first (`import_plugins`), so they can be
selected like built-in ones.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from rft.config.binding import Issue, Notice
from rft.config.derived import trainer_gpus
from rft.config.schema import RftConfig, TasksetConfig
from rft.errors import ConfigError
from rft.registry import Entry, Registry, argument_issues

PLUGINS_ENV = "RFT_PLUGINS"  # more plugin modules, separated by commas


def plugin_names(cfg: RftConfig) -> list[tuple[str, str]]:
    """(config path, module) for `plugins` and then the RFT_PLUGINS environment variable."""
    named = [(f"plugins[{i}]", name) for i, name in enumerate(cfg.plugins)]
    extra = [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    return named + [(f"${PLUGINS_ENV}", name) for name in extra]


def import_plugins(cfg: RftConfig, base_dir: Path | None = None) -> list[Issue]:
    """Import each plugin module (a dotted name, or a .py file relative to `base_dir`)."""
    issues = []
    for path, name in plugin_names(cfg):
        try:
            _import_plugin(name, base_dir)
        except Exception as exc:  # any error in user code is reported against its config entry
            issues.append(
                Issue(path, f"cannot import plugin {name!r}: {type(exc).__name__}: {exc}")
            )
    return issues


def _import_plugin(name: str, base_dir: Path | None) -> None:
    if not name.endswith(".py"):
        importlib.import_module(name)
        return
    file = Path(name).expanduser()
    if not file.is_absolute() and base_dir is not None:
        file = base_dir / file
    file = file.resolve()
    module_name = f"rft_plugin_{file.stem}_{abs(hash(str(file))):x}"
    if module_name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"{file} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise


def _check_mix(c: _Checker, cfg: RftConfig, args: Mapping[str, Any]) -> None:
    """`mix` reads its demonstrations from a named auxiliary buffer, with a ratio in [0, 1]."""
    name = args.get("sft_dataset_name", "sft_dataset")
    buffers = cfg.buffer.trainer_input.auxiliary_buffers
    if name not in buffers:
        known = ", ".join(sorted(buffers)) or "none"
        c.issues.append(
            Issue(
                "algorithm.sample_strategy_args.sft_dataset_name",
                f"sample_strategy mix reads demonstrations from buffer.trainer_input."
                f"auxiliary_buffers.{name}, which is not set (entries: {known})",
            )
        )
    ratio = args.get("expert_data_ratio", 0.5)
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
        c.issues.append(
            Issue(
                "algorithm.sample_strategy_args.expert_data_ratio",
                f"must be a number in [0, 1], got {ratio!r}",
            )
        )


def _check_pairs(c: _Checker, cfg: RftConfig, policy_loss_fn: str) -> None:
    """A loss over adjacent pairs of rows (its trait `paired`: dpo) needs micro-batches and
    batches of whole pairs."""
    from rft.algorithms.policy_losses import POLICY_LOSS_FN

    if not POLICY_LOSS_FN.trait(policy_loss_fn, "paired", False):
        return
    for where, size in (
        ("trainer.micro_batch_size", cfg.trainer.micro_batch_size),
        ("buffer.train_batch_size", cfg.buffer.train_batch_size),
    ):
        if size is not None and size % 2:
            c.issues.append(
                Issue(
                    where,
                    f"{size}: policy_loss_fn {policy_loss_fn!r} trains pairs of a chosen and a "
                    "rejected response (two experiences each); use an even number",
                )
            )


def _check_dataset(
    c: _Checker, cfg: RftConfig, dataset: str | None, trains_offline: bool = False
) -> None:
    """An algorithm that trains on a dataset (its preset's `dataset` trait) reads it from a file
    experience buffer and runs no explorer; a file experience buffer needs such an algorithm.
    Offline (`rft train --from-topic`), the topic is the input and no file is needed; mode bench
    trains nothing and needs none either."""
    buf = cfg.buffer.trainer_input.experience_buffer
    where = "buffer.trainer_input.experience_buffer"
    algorithm = cfg.algorithm.algorithm_type
    if dataset is None:
        if buf.storage_type == "file":
            c.issues.append(
                Issue(
                    f"{where}.storage_type",
                    f"file: algorithm {algorithm!r} trains on rollouts, not on a dataset "
                    "(a dataset file is trained by algorithm_type sft, cpt or dpo)",
                )
            )
        return
    needs_file = not trains_offline and cfg.mode != "bench"
    if needs_file and (buf.storage_type != "file" or not buf.path):
        c.issues.append(
            Issue(
                f"{where}.storage_type",
                f"algorithm {algorithm!r} trains on a dataset: set storage_type file and `path` "
                f"to a dataset file or directory (got storage_type {buf.storage_type!r})",
            )
        )
    if cfg.mode not in ("train", "bench"):
        c.issues.append(
            Issue(
                "mode",
                f"{cfg.mode!r}: algorithm {algorithm!r} trains on a published dataset with no "
                "explorer; use mode train (`rft run` publishes the dataset, then trains)",
            )
        )


class _Checker:
    """Collects an Issue per failed lookup, under the key path that held the name."""

    def __init__(self) -> None:
        self.issues: list[Issue] = []

    def look(self, path: str, lookup: Callable[[], Any]) -> Any:
        try:
            return lookup()
        except ConfigError as exc:
            self.issues.append(Issue(path, str(exc)))
            return None

    def name(self, path: str, registry: Registry[Any], name: str, key: str | None = None) -> Any:
        """The part `name` selects in `registry`, or None with an Issue at `path`."""
        return self.look(path, lambda: registry.get(name, key=key))

    def entry(self, path: str, registry: Registry[Any], name: str, *checked: Any) -> Any:
        """The entry `name` selects, with its missing packages and its own checks of `checked`
        said (at `path` and at the keys its checks name); None with an Issue when unknown."""
        entry = self.packaged(path, registry, name)
        if entry is not None:
            self.issues += entry.issues(*checked)  # a check imports none of the entry's packages
        return entry

    def packaged(self, path: str, registry: Registry[Any], name: str) -> Any:
        """The entry `name` selects, with its missing packages said at `path` (its own checks
        not run); None with an Issue when unknown."""
        entry: Entry[Any] | None = self.look(path, lambda: registry.entry(name))
        if entry is None:
            return None
        for req in entry.missing_packages():
            self.issues.append(
                Issue(
                    path,
                    f"{name!r} needs the {req.package} package, which is not installed: "
                    f"{req.install}",
                )
            )
        return entry

    def args(self, path: str, fn: Any, args: Mapping[str, Any], fixed: frozenset[str]) -> None:
        """`args` must be keyword arguments that `fn` accepts (beyond its fixed parameters)."""
        if fn is not None and args:
            self.issues += [Issue(k, m) for k, m in argument_issues(path, fn, args, fixed)]


def _check_reward(c: _Checker, cfg: RftConfig, path: str, taskset: TasksetConfig) -> None:
    """A taskset's reward function (its own, or explorer_input's, filled in at load): known, its
    packages installed, its own checks of reward_fn_args (they say what a refused arg should be
    instead), then every other arg against the function's keywords; and the auxiliary model it
    asks, if it asks one, configured."""
    from rft.rewards import AUXILIARY_MODEL_ARG, REWARD_FUNCTIONS, asked_model

    name = taskset.default_reward_fn_type
    if name is None:
        return
    key = f"{path}.default_reward_fn_type"
    before = len(c.issues)
    entry = c.entry(key, REWARD_FUNCTIONS, name, taskset.reward_fn_args, path)
    if entry is None or entry.missing_packages():
        return
    said = {issue.path for issue in c.issues[before:]}
    rest = {
        k: v for k, v in taskset.reward_fn_args.items() if f"{path}.reward_fn_args.{k}" not in said
    }
    fixed = frozenset({"response_text", "task_payload", AUXILIARY_MODEL_ARG})
    c.args(f"{path}.reward_fn_args", c.name(key, REWARD_FUNCTIONS, name), rest, fixed)
    model = asked_model(name, taskset.reward_fn_args)
    names = [aux.name for aux in cfg.explorer.auxiliary_models]
    if model is not None and model not in names:
        arg = REWARD_FUNCTIONS.trait(name, "asks_model")
        c.issues.append(
            Issue(
                f"{path}.reward_fn_args.{arg}",
                f"{name} asks the auxiliary model {model!r}, which explorer.auxiliary_models "
                f"does not name (names: {', '.join(repr(n) for n in names) or 'none'})",
            )
        )


LORA_INSTALL_COMMAND = "pip install 'peft>=0.17'  (or: pip install 'rft[lora]')"


def lora_issues(cfg: RftConfig) -> list[Issue]:
    """model.lora_configs: the trainer engine and the rollout engine must both handle adapters
    (their entries' `lora` trait), and peft must be installed."""
    from rft.engines.rollout import ROLLOUT_ENGINES
    from rft.engines.trainer import TRAINER_ENGINES

    if not cfg.model.lora_configs:
        return []
    issues = []
    trainer, rollout = cfg.trainer.engine_name, cfg.explorer.rollout_model.engine_type
    if trainer in TRAINER_ENGINES and not TRAINER_ENGINES.trait(trainer, "lora", False):
        issues.append(
            Issue(
                "model.lora_configs",
                f"the {trainer} trainer engine trains full models only; LoRA trains with "
                f"trainer_type {', '.join(n for n in TRAINER_ENGINES if TRAINER_ENGINES.trait(n, 'lora', False))}",
            )
        )
    known = rollout in ROLLOUT_ENGINES
    if cfg.mode != "train" and known and not ROLLOUT_ENGINES.trait(rollout, "lora", False):
        able = [n for n in ROLLOUT_ENGINES if ROLLOUT_ENGINES.trait(n, "lora", False)]
        issues.append(
            Issue(
                "model.lora_configs",
                f"rollout engine {rollout!r} cannot apply adapter versions (engines that "
                f"can: {', '.join(able)})",
            )
        )
    if importlib.util.find_spec("peft") is None:
        issues.append(Issue("model.lora_configs", f"needs peft: {LORA_INSTALL_COMMAND}"))
    return issues


def _check_teacher(c: _Checker, cfg: RftConfig) -> None:
    """A distillation algorithm's teacher, `explorer.auxiliary_models[0]`, is loaded by the
    trainer from its model_path (rft.engines.teacher): it must name one, other than the
    student, for an engine that loads weights, and the trainer engine must score it."""
    from rft.engines.rollout import ROLLOUT_ENGINES
    from rft.engines.trainer import TRAINER_ENGINES

    algorithm = cfg.algorithm.algorithm_type
    entries = cfg.explorer.auxiliary_models
    if not entries:
        c.issues.append(
            Issue(
                "explorer.auxiliary_models",
                f"algorithm {algorithm!r} needs a teacher: its first entry, with the teacher's "
                "model_path (the trainer scores the student's samples with it)",
            )
        )
        return
    at = "explorer.auxiliary_models[0]"
    teacher = entries[0]
    if teacher.engine_type in ROLLOUT_ENGINES and not ROLLOUT_ENGINES.trait(
        teacher.engine_type, "loads_weights", True
    ):
        c.issues.append(
            Issue(
                f"{at}.engine_type",
                f"{teacher.engine_type!r} has no local weights, and algorithm {algorithm!r} "
                "scores the student's tokens with the teacher's weights in the trainer: give "
                "the teacher as an hf entry with its model_path",
            )
        )
    elif teacher.model_path in (None, cfg.model.model_path):
        c.issues.append(
            Issue(
                f"{at}.model_path",
                f"is the student's own model (model.model_path); algorithm {algorithm!r} needs "
                "the teacher's path here",
            )
        )
    engine = cfg.trainer.engine_name
    if engine in TRAINER_ENGINES and not TRAINER_ENGINES.trait(engine, "teacher", False):
        takes = [n for n in TRAINER_ENGINES if TRAINER_ENGINES.trait(n, "teacher", False)]
        c.issues.append(
            Issue(
                "trainer.trainer_type",
                f"engine {engine!r} cannot score a teacher for algorithm {algorithm!r} yet "
                f"(engines that can: {', '.join(takes)})",
            )
        )


def _check_auxiliary_models(c: _Checker, cfg: RftConfig) -> None:
    """Each auxiliary model's engine: known, its packages installed, able to serve one (its
    entry's `auxiliary` trait), given the server settings it reads (and only those), its
    engine_args among the ones it reads, and a model_path only where it loads one."""
    from rft.engines.rollout import ROLLOUT_ENGINES

    for i, aux in enumerate(cfg.explorer.auxiliary_models):
        at = f"explorer.auxiliary_models[{i}]"
        engine = c.packaged(f"{at}.engine_type", ROLLOUT_ENGINES, aux.engine_type)
        if engine is None:
            continue
        if engine.trait("auxiliary") is None:
            c.issues.append(
                Issue(
                    f"{at}.engine_type",
                    f"{aux.engine_type!r} cannot serve an auxiliary model (engines that can: "
                    f"{', '.join(n for n in ROLLOUT_ENGINES if ROLLOUT_ENGINES.trait(n, 'auxiliary'))})",
                )
            )
            continue
        reads = engine.trait("reads", ())
        if "base_url" in reads and not aux.base_url:
            c.issues.append(
                Issue(
                    f"{at}.base_url",
                    f"is required by engine_type {aux.engine_type} (e.g. http://host:8000/v1)",
                )
            )
        if aux.model_path is not None and not engine.trait("loads_weights", True):
            c.issues.append(
                Issue(
                    f"{at}.model_path",
                    f"is not read by engine {aux.engine_type!r}: its model lives in the server "
                    "(name its id with engine_args.model)",
                )
            )
        own = engine.trait("args", ()) + tuple(k for k in reads if k not in _SERVER_KEYS)
        takes = engine.trait("auxiliary_args", own)
        what = f"an auxiliary model of engine {aux.engine_type!r}"
        _unread_settings(c, at, aux, engine, takes, what)


# the settings of a server an engine calls, read only by an engine whose entry `reads` them
_SERVER_KEYS = ("base_url", "api_key")


def _unread_settings(
    c: _Checker, at: str, section: Any, engine: Entry[Any], takes: Sequence[str], what: str
) -> None:
    """Issues at `at` for a server setting of `section` that `engine` does not read, and for each
    of its engine_args that `what` does not take (`takes`)."""
    for key in _SERVER_KEYS:
        if getattr(section, key) is not None and key not in engine.trait("reads", ()):
            c.issues.append(
                Issue(
                    f"{at}.{key}",
                    f"is not read by {what}: only an engine that calls a server reads it "
                    "(engine_type openai)",
                )
            )
    for key in section.engine_args:
        if key not in takes:
            c.issues.append(
                Issue(
                    f"{at}.engine_args.{key}",
                    f"is not read by {what} (it reads: {', '.join(takes) or 'nothing'})",
                )
            )


def check_parts(cfg: RftConfig, trains_offline: bool = False) -> list[Issue]:
    """Every registry name in `cfg` looked up (and the args of parts that take them checked).
    `trains_offline`: the config trains from a topic (`rft train --from-topic`)."""
    from rft.algorithms.advantages import ADVANTAGE_FN
    from rft.algorithms.aggregation import LOSS_AGG_MODES
    from rft.algorithms.entropy import ENTROPY_LOSS_FN
    from rft.algorithms.kl import KL_ESTIMATORS, KL_FN
    from rft.algorithms.policy_losses import POLICY_LOSS_FN
    from rft.algorithms.presets import ALGORITHM_TYPES, resolve_algorithm
    from rft.buffer.experience_operators import EXPERIENCE_OPERATORS
    from rft.buffer.expert_source import EXPERT_SOURCES
    from rft.buffer.priority_fns import PRIORITY_FNS
    from rft.buffer.sample_strategy import SAMPLE_STRATEGIES, sampler_choice
    from rft.consumers.metrics.sinks import SinkConfigError, check_sinks
    from rft.engines.rollout import ROLLOUT_ENGINES
    from rft.engines.trainer import LR_SCHEDULES, TRAINER_ENGINES
    from rft.events.transport import known_backend
    from rft.producers.task_selectors import selector_part
    from rft.producers.taskset_reader import TASKSET_SOURCES
    from rft.rewards import REWARD_FUNCTIONS
    from rft.storage.object_store import OBJECT_STORES
    from rft.supervisor.launchers import LAUNCHERS
    from rft.synchronizer import SYNC_STYLES, build_sync_style
    from rft.synchronizer.transport import WEIGHT_TRANSPORTS
    from rft.tools import TOOL_CALL_PARSERS
    from rft.tracing.setup import check_exporter
    from rft.workflows import WORKFLOWS

    c = _Checker()
    algo = cfg.algorithm
    preset = c.name("algorithm.algorithm_type", ALGORITHM_TYPES, algo.algorithm_type)
    if preset is not None and preset.unavailable is not None:  # registered, but needs more
        c.issues.append(
            Issue("algorithm.algorithm_type", f"{algo.algorithm_type!r} {preset.unavailable}")
        )
    for key, registry in (
        ("advantage_fn", ADVANTAGE_FN),
        ("policy_loss_fn", POLICY_LOSS_FN),
        ("kl_loss_fn", KL_FN),
        ("kl_penalty_fn", KL_ESTIMATORS),
        ("entropy_loss_fn", ENTROPY_LOSS_FN),
        ("loss_agg_mode", LOSS_AGG_MODES),
    ):
        name = getattr(algo, key)
        if name is not None:
            c.name(f"algorithm.{key}", registry, name, key=key)
    if not c.issues:  # the preset's parts and every *_args against the functions' signatures
        trains = cfg.mode != "bench"  # bench never trains: group sizes do not matter there
        spec = c.look("algorithm", lambda: resolve_algorithm(algo, check_repeat_times=trains))
        if spec is not None:
            # rft's buffer.trainer_input.max_staleness folds into the strategy and its args
            chosen, args = sampler_choice(
                spec.sample_strategy,
                algo.sample_strategy_args,
                cfg.buffer.trainer_input.max_staleness,
            )
            strategy = c.name("algorithm.sample_strategy", SAMPLE_STRATEGIES, chosen)
            c.args("algorithm.sample_strategy_args", strategy, args, frozenset({"setup"}))
            if chosen == "mix":
                _check_mix(c, cfg, args)
            _check_dataset(c, cfg, spec.dataset, trains_offline)
            _check_pairs(c, cfg, spec.policy_loss_fn)
            if spec.use_critic:
                _check_critic(c, cfg)
            if spec.uses_teacher:
                _check_teacher(c, cfg)

    trainer_input = cfg.buffer.trainer_input
    replay = trainer_input.experience_buffer.replay_buffer
    replay_key = "buffer.trainer_input.experience_buffer.replay_buffer"
    priority_fn = c.name(f"{replay_key}.priority_fn", PRIORITY_FNS, replay.priority_fn)
    c.args(
        f"{replay_key}.priority_fn_args",
        priority_fn,
        replay.priority_fn_args,
        frozenset({"model_version", "use_count", "noise"}),
    )
    for name, aux in trainer_input.auxiliary_buffers.items():
        c.name(
            f"buffer.trainer_input.auxiliary_buffers.{name}.storage_type",
            EXPERT_SOURCES,
            aux.storage_type,
        )

    pipeline_key = "data_processor.experience_pipeline.operators"
    for i, op in enumerate(cfg.data_processor.experience_pipeline.operators):
        at = f"{pipeline_key}[{i}]"
        entry = c.entry(f"{at}.name", EXPERIENCE_OPERATORS, op.name, op.args, f"{at}.args")
        if entry is not None:  # its args against its keywords (its own checks said the rest)
            operator = c.name(f"{at}.name", EXPERIENCE_OPERATORS, op.name)
            c.args(f"{at}.args", operator, op.args, frozenset({"experiences"}))

    inputs = cfg.buffer.explorer_input
    for key in ("default_workflow_type", "default_eval_workflow_type"):
        name = getattr(inputs, key)
        if name is not None:
            c.name(f"buffer.explorer_input.{key}", WORKFLOWS, name)
    if inputs.default_reward_fn_type is not None:
        c.entry(
            "buffer.explorer_input.default_reward_fn_type",
            REWARD_FUNCTIONS,
            inputs.default_reward_fn_type,
            {},
            "buffer.explorer_input",
        )
    tasksets: list[tuple[str, TasksetConfig | None]] = [
        ("buffer.explorer_input.taskset", inputs.taskset)
    ]
    tasksets += [
        (f"buffer.explorer_input.eval_tasksets[{i}]", t) for i, t in enumerate(inputs.eval_tasksets)
    ]
    for path, taskset in tasksets:
        if taskset is None:
            continue
        workflow = None
        if taskset.default_workflow_type is not None:
            workflow = c.name(
                f"{path}.default_workflow_type", WORKFLOWS, taskset.default_workflow_type
            )
        if workflow is not None:  # workflow_args against the args the workflow declares
            c.args(
                f"{path}.workflow_args",
                workflow.workflow_args_signature(),
                taskset.workflow_args,
                frozenset(),
            )
        c.name(
            f"{path}.format.tool_call_parser", TOOL_CALL_PARSERS, taskset.format.tool_call_parser
        )
        _check_reward(c, cfg, path, taskset)
        selector = c.look(
            f"{path}.task_selector.selector_type",
            functools.partial(selector_part, taskset.task_selector.selector_type),
        )
        c.args(
            f"{path}.task_selector.kwargs",
            selector,
            taskset.task_selector.kwargs,
            frozenset({"num_rows", "epoch", "seed", "features"}),
        )
        c.entry(f"{path}.storage_type", TASKSET_SOURCES, taskset.storage_type, taskset, path)

    rollout = cfg.explorer.rollout_model
    engine = c.entry(
        "explorer.rollout_model.engine_type", ROLLOUT_ENGINES, rollout.engine_type, cfg
    )
    if engine is not None:  # server settings and engine_args the engine's entry does not read
        _unread_settings(
            c,
            "explorer.rollout_model",
            rollout,
            engine,
            engine.trait("args", ()),
            f"engine {rollout.engine_type!r}",
        )
    c.name("explorer.rollout_model.tool_call_parser", TOOL_CALL_PARSERS, rollout.tool_call_parser)
    _check_auxiliary_models(c, cfg)
    if c.entry("trainer.trainer_type", TRAINER_ENGINES, cfg.trainer.engine_name, cfg):
        c.issues += trainer_rank_issues(cfg)
    c.issues += lora_issues(cfg)
    engine_name = cfg.trainer.engine_name
    if (
        cfg.trainer.param_offload
        and engine_name in TRAINER_ENGINES
        and not TRAINER_ENGINES.trait(engine_name, "param_offload", False)
    ):
        c.issues.append(
            Issue(
                "trainer.param_offload",
                f"the {engine_name} engine keeps its parameters on its device; parameter "
                "offload needs trainer_type fsdp2 (FSDP2's CPU offload policy)",
            )
        )
    c.name("trainer.optim.warmup_style", LR_SCHEDULES, cfg.trainer.optim.warmup_style)
    sync = cfg.synchronizer
    if c.name("synchronizer.sync_style", SYNC_STYLES, sync.sync_style) is not None:
        # the style checks the η bound against its publishing schedule (a deadlock otherwise)
        key = "synchronizer.max_head_offpolicyness"
        try:
            build_sync_style(
                sync.sync_style, sync.sync_interval, sync.sync_offset, sync.max_head_offpolicyness
            )
        except ConfigError as exc:
            c.issues.append(Issue(key, str(exc).removeprefix(f"{key}: ")))
    c.packaged("synchronizer.sync_method", WEIGHT_TRANSPORTS, sync.sync_method)
    launcher = c.name("cluster.launcher", LAUNCHERS, cfg.cluster.launcher)
    if launcher is not None:  # its package, and whether the run's processes fit its cluster
        c.issues += launcher().check(cfg)
    try:  # names, optional packages (with the install command) and each sink's settings
        check_sinks(cfg.monitor.monitor_type, cfg.monitor.monitor_args)
    except SinkConfigError as exc:
        c.issues.append(Issue(exc.key, str(exc)))
    for key, problem in check_exporter(cfg.monitor.trace_exporter, cfg.monitor.trace_args):
        c.issues.append(Issue(key, problem))
    c.look("stack.kafka.client", lambda: known_backend(cfg.stack.kafka.client))
    uri = cfg.stack.object_store.uri
    if uri is not None:
        c.name("stack.object_store.uri", OBJECT_STORES, urlparse(uri).scheme)
    return c.issues


def _check_critic(c: _Checker, cfg: RftConfig) -> None:
    """A critic is trained: the trainer engine must carry one (its entry's trait `critic`), its
    model must be one rft can load, and its loss's aggregation must exist."""
    from rft.algorithms.aggregation import LOSS_AGG_MODES
    from rft.engines.models import MODEL_SOURCES
    from rft.engines.trainer import TRAINER_ENGINES

    engine = cfg.trainer.engine_name
    if engine in TRAINER_ENGINES and not TRAINER_ENGINES.trait(engine, "critic", False):
        c.issues.append(
            Issue(
                "trainer.trainer_type",
                f"the {engine} engine cannot train a critic beside the policy yet, and "
                f"algorithm_type {cfg.algorithm.algorithm_type!r} needs one (its advantage fn "
                "reads a critic's values); use trainer_type: torch (one process)",
            )
        )
    path = cfg.model.critic_model_path
    if path is not None and path not in MODEL_SOURCES and not Path(path).expanduser().is_dir():
        c.issues.append(
            Issue(
                "model.critic_model_path",
                f"{path!r} is neither a model source ({', '.join(MODEL_SOURCES.names())}) nor "
                "an existing local directory",
            )
        )
    c.name("critic.loss_agg_mode", LOSS_AGG_MODES, cfg.critic.loss_agg_mode)


def fill_parts(cfg: RftConfig) -> None:
    """Values that follow from the entries a config selects, in place: the trainer engine that
    runs the chosen one with Trinity's `trainer_strategy` (its entry's `sharded_by`), and
    trainer.world_size: the GPUs left after rollout for an engine that runs over ranks (on
    GPUs), else 1."""
    from rft.engines.trainer import TRAINER_ENGINES

    trainer = cfg.trainer
    if trainer.trainer_strategy is not None and trainer.trainer_type in TRAINER_ENGINES:
        sharded_by = TRAINER_ENGINES.trait(trainer.trainer_type, "sharded_by", {})
        trainer.trainer_type = sharded_by.get(trainer.trainer_strategy, trainer.trainer_type)
    if trainer.world_size is None and trainer.engine_name in TRAINER_ENGINES:
        many = TRAINER_ENGINES.trait(trainer.engine_name, "many_ranks", False)
        sharded = many and cfg.cluster.gpu_per_node > 0
        trainer.world_size = max(1, trainer_gpus(cfg)) if sharded else 1


def trainer_rank_issues(cfg: RftConfig) -> list[Issue]:
    """trainer.world_size: one rank for an engine that does not run over ranks; on GPUs, one GPU
    per rank."""
    from rft.engines.trainer import TRAINER_ENGINES

    trainer = cfg.trainer
    ranks = trainer.world_size or 1
    if ranks > 1 and not TRAINER_ENGINES.trait(trainer.engine_name, "many_ranks", False):
        return [
            Issue(
                "trainer.world_size",
                f"{ranks} ranks, but the {trainer.engine_name} engine runs one; set "
                "trainer.trainer_type: fsdp2 (or trainer_strategy: fsdp2) to shard over several",
            )
        ]
    gpus = cfg.cluster.gpu_per_node
    if gpus > 0 and ranks > max(1, trainer_gpus(cfg)):
        rollout = cfg.explorer.rollout_model
        return [
            Issue(
                "trainer.world_size",
                f"{ranks} ranks need a GPU each, but cluster.gpu_per_node {gpus} leaves "
                f"{trainer_gpus(cfg)} after rollout (engine_num {rollout.engine_num} x "
                f"tensor_parallel_size {rollout.tensor_parallel_size})",
            )
        ]
    return []


def launcher_notices(cfg: RftConfig) -> list[Notice]:
    """What the configured launcher says about placing this config's processes."""
    from rft.supervisor.launchers import LAUNCHERS

    try:
        launcher = LAUNCHERS.get(cfg.cluster.launcher)
    except ConfigError:
        return []  # check_parts has said so
    return launcher().notices(cfg)


def parts_stage(
    cfg: RftConfig, base_dir: Path | None, trains_offline: bool = False
) -> tuple[list[Issue], list[Notice]]:
    """The load stage of the parts: plugins imported, entry defaults filled, entries checked."""
    issues = import_plugins(cfg, base_dir)
    fill_parts(cfg)
    issues += check_parts(cfg, trains_offline)
    return issues, ([] if issues else launcher_notices(cfg))
