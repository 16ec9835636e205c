"""Load-time checks of every config value that names a registered part, against its registry.

A misspelt advantage fn, workflow or rollout engine must fail when the config loads, in the process
the user started, with the registry's close-match hint, not minutes later in a child process. This
module is the one place the config layer reaches up to the registries, and it imports them inside
`check_parts` only: the registries' modules import torch and transformers, and `rft.config` must
stay importable without them. Parts a user registers in a module listed under `plugins` are
imported first (`import_plugins`), so they can be selected like built-in ones.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from rft.config.binding import Issue, join
from rft.config.schema import RftConfig, TasksetConfig
from rft.errors import ConfigError
from rft.registry import Registry, unknown_arguments

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

    def args(self, path: str, fn: Any, args: Mapping[str, Any], fixed: frozenset[str]) -> None:
        """`args` must be keyword arguments that `fn` accepts (beyond its fixed parameters)."""
        if fn is None or not args:
            return
        unknown, accepted = unknown_arguments(fn, args, fixed)
        for name in unknown:
            self.issues.append(
                Issue(
                    join(path, name),
                    f"is not an argument of {getattr(fn, '__name__', fn)} "
                    f"(accepts: {', '.join(accepted) or 'nothing'})",
                )
            )


def check_parts(cfg: RftConfig) -> list[Issue]:
    """Every registry name in `cfg` looked up (and the args of parts that take them checked)."""
    from consumers.metric_sinks import SinkConfigError, check_sinks
    from producers.generators import TASK_GENERATORS
    from producers.task_selectors import TASK_SELECTORS
    from rft.algorithms.advantages import ADVANTAGE_FN
    from rft.algorithms.aggregation import LOSS_AGG_MODES
    from rft.algorithms.entropy import ENTROPY_LOSS_FN
    from rft.algorithms.kl import KL_ESTIMATORS, KL_FN
    from rft.algorithms.policy_losses import POLICY_LOSS_FN
    from rft.algorithms.presets import ALGORITHM_TYPES, resolve_algorithm
    from rft.buffer.sample_strategy import SAMPLE_STRATEGIES
    from rft.engines.rollout import ROLLOUT_ENGINES
    from rft.engines.trainer import LR_SCHEDULES, TRAINER_ENGINES
    from rft.events.transport import known_backend
    from rft.rewards import REWARD_FUNCTIONS
    from rft.storage.object_store import OBJECT_STORES
    from rft.supervisor.launchers import LAUNCHERS
    from rft.synchronizer import SYNC_STYLES
    from rft.workflows import WORKFLOWS

    c = _Checker()
    algo = cfg.algorithm
    c.name("algorithm.algorithm_type", ALGORITHM_TYPES, algo.algorithm_type)
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
            strategy = c.name("algorithm.sample_strategy", SAMPLE_STRATEGIES, spec.sample_strategy)
            c.args(
                "algorithm.sample_strategy_args",
                strategy,
                algo.sample_strategy_args,
                frozenset({"train_batch_size"}),
            )

    inputs = cfg.buffer.explorer_input
    for key in ("default_workflow_type", "default_eval_workflow_type"):
        name = getattr(inputs, key)
        if name is not None:
            c.name(f"buffer.explorer_input.{key}", WORKFLOWS, name)
    if inputs.default_reward_fn_type is not None:
        c.name(
            "buffer.explorer_input.default_reward_fn_type",
            REWARD_FUNCTIONS,
            inputs.default_reward_fn_type,
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
        if taskset.default_workflow_type is not None:
            c.name(f"{path}.default_workflow_type", WORKFLOWS, taskset.default_workflow_type)
        if taskset.default_reward_fn_type is not None:
            c.name(
                f"{path}.default_reward_fn_type", REWARD_FUNCTIONS, taskset.default_reward_fn_type
            )
        selector = c.name(
            f"{path}.task_selector.selector_type",
            TASK_SELECTORS,
            taskset.task_selector.selector_type,
        )
        c.args(
            f"{path}.task_selector.kwargs",
            selector,
            taskset.task_selector.kwargs,
            frozenset({"num_rows", "epoch", "seed"}),
        )
        if taskset.storage_type == "generator":
            generator = c.name(f"{path}.path", TASK_GENERATORS, taskset.path)
            c.args(f"{path}.generator_args", generator, taskset.generator_args, frozenset())

    rollout = cfg.explorer.rollout_model
    c.name("explorer.rollout_model.engine_type", ROLLOUT_ENGINES, rollout.engine_type)
    c.name("trainer.trainer_type", TRAINER_ENGINES, cfg.trainer.trainer_type)
    c.name("trainer.optim.warmup_style", LR_SCHEDULES, cfg.trainer.optim.warmup_style)
    c.name("synchronizer.sync_style", SYNC_STYLES, cfg.synchronizer.sync_style)
    launcher = c.name("cluster.launcher", LAUNCHERS, cfg.cluster.launcher)
    if launcher is not None:  # its package, and whether the run's processes fit its cluster
        c.issues += launcher().check(cfg)
    try:  # names, optional packages (with the install command) and each sink's settings
        check_sinks(cfg.monitor.monitor_type, cfg.monitor.monitor_args)
    except SinkConfigError as exc:
        c.issues.append(Issue(exc.key, str(exc)))
    c.look("stack.kafka.client", lambda: known_backend(cfg.stack.kafka.client))
    uri = cfg.stack.object_store.uri
    if uri is not None:
        c.name("stack.object_store.uri", OBJECT_STORES, urlparse(uri).scheme)
    return c.issues
