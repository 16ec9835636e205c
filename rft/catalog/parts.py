"""Load-time checks of every config value that names a registered part: a walk over the fields
that select parts.

A misspelt advantage fn, workflow or rollout engine must fail when the config loads, in the process
the user started, with the registry's close-match hint, not minutes later in a child process.
`selections` lists each field that selects a part, with what that part's checks are given; the
walk looks each name up in its registry, says the optional packages the entry needs (with the
install command), runs the entry's own check and its registry's rule (`Registry.issues`: the rules
about a part and another live with the parts), and checks the keyword args the config gives the
part against its signature. The rules themselves live in the parts' modules; nothing here
compares a registered name. The registries' modules are imported inside the walk only (they
import torch and transformers).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from rft.catalog.part_keys import bind_part_keys
from rft.catalog.plugins import import_plugins
from rft.config.binding import Issue, Notice
from rft.config.schema import RftConfig
from rft.errors import ConfigError
from rft.registry import Entry, Registry, argument_issues


@dataclass(frozen=True)
class Args:
    """Keyword args the config gives a part, checked against the part's signature (beyond its
    `fixed` parameters); `signature` turns the loaded part into the callable whose signature
    counts (a workflow class declares its args by a method)."""

    path: str
    values: Mapping[str, Any]
    fixed: frozenset[str] = frozenset()
    signature: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class Selection:
    """One config value that selects a registered part.

    `how`: "name" looks the part up (importing it; by `lookup` where the name selects from
    more than one registry); "packaged" says the entry's missing packages and runs its
    registry's rule; "entry" also runs the entry's own check. `given` is what the check and the
    rule are given. `section`: the section that selects the part, open to the part's own keys
    (rft.catalog.part_keys), which are bound against the selected entry's.
    """

    path: str
    registry: Registry[Any, Any] | None
    name: str | None
    how: Literal["name", "packaged", "entry"] = "entry"
    given: tuple[Any, ...] = ()
    args: Args | None = None
    lookup: Callable[[str], Any] | None = None
    section: Any = None


class _Checker:
    """Collects an Issue per failed lookup, under the key path that held the name."""

    def __init__(self) -> None:
        self.issues: list[Issue] = []
        self.notices: list[Notice] = []

    def look(self, path: str, lookup: Callable[[], Any]) -> Any:
        try:
            return lookup()
        except ConfigError as exc:
            self.issues.append(Issue(path, str(exc)))
            return None

    def said(self, found: list[Any]) -> None:
        """Issues of a check or a rule: Issue objects or (config key, problem) pairs."""
        self.issues += [f if isinstance(f, Issue) else Issue(*f) for f in found]

    def select(self, sel: Selection) -> None:
        if sel.name is None:
            return
        name, registry = sel.name, sel.registry
        if sel.how == "name":
            if sel.lookup is not None:
                part = self.look(sel.path, functools.partial(sel.lookup, name))
            else:
                assert registry is not None
                part = self.look(sel.path, lambda: registry.get(name, key=_key(sel.path)))
            self._args(sel.args, part, set())
            return
        assert registry is not None
        entry: Entry[Any, Any] | None = self.look(sel.path, lambda: registry.entry(name))
        if entry is None:
            return
        missing = entry.missing_packages()
        for req in missing:
            self.issues.append(
                Issue(
                    sel.path,
                    f"{name!r} needs the {req.package} package, which is not installed: "
                    f"{req.install}",
                )
            )
        before = len(self.issues)
        # a check imports none of the entry's packages, so it runs when they are missing too
        self.said(registry.issues(name, *sel.given, own=sel.how == "entry"))
        if sel.args is not None and not missing:  # the args its checks did not speak of
            said = {issue.path for issue in self.issues[before:]}
            part = self.look(sel.path, lambda: registry.get(name))
            self._args(sel.args, part, said)
        if sel.section is not None:
            at = sel.path.rsplit(".", 1)[0]
            issues, notices = bind_part_keys(registry, name, at, sel.section)
            self.issues += issues
            self.notices += notices

    def _args(self, args: Args | None, part: Any, said: set[str]) -> None:
        if args is None or part is None or not args.values:
            return
        fn = args.signature(part) if args.signature is not None else part
        if fn is None:  # a part that declares no args takes any
            return
        rest = [k for k in args.values if f"{args.path}.{k}" not in said]
        self.issues += [Issue(k, m) for k, m in argument_issues(args.path, fn, rest, args.fixed)]


def _key(path: str) -> str:
    """The last part of a key path: the name a registry shared by several keys is told by."""
    return path.rsplit(".", 1)[-1]


def check_parts(cfg: RftConfig, trains_offline: bool = False) -> tuple[list[Issue], list[Notice]]:
    """Every registry name in `cfg` looked up, each selected part checked (and the args of parts
    that take them, and its own keys bound); the problems, and the keys warned about.
    `trains_offline`: the config trains from a topic (`rft train --from-topic`)."""
    from rft.consumers.metrics.sinks import SinkConfigError, check_sinks
    from rft.events.transport import known_backend
    from rft.tracing.setup import check_exporter

    c = _Checker()
    algorithm = _algorithm(c, cfg)
    for selection in selections(cfg, algorithm, trains_offline):
        c.select(selection)
    # settings checked by their own modules, each raising or returning located problems
    try:
        check_sinks(cfg.monitor.monitor_type, cfg.monitor.monitor_args)
    except SinkConfigError as exc:
        c.issues.append(Issue(exc.key, str(exc)))
    c.issues += [
        Issue(k, m) for k, m in check_exporter(cfg.monitor.trace_exporter, cfg.monitor.trace_args)
    ]
    c.look("stack.kafka.client", lambda: known_backend(cfg.stack.kafka.client))
    return c.issues, c.notices


def _algorithm(c: _Checker, cfg: RftConfig) -> Any:
    """The AlgorithmSpec `cfg` resolves to (its preset and the parts it names looked up), or
    None with the issues said."""
    from rft.algorithms.presets import ALGORITHM_PART_KEYS, ALGORITHM_TYPES, resolve_algorithm

    algo = cfg.algorithm
    before = len(c.issues)
    preset = c.look("algorithm.algorithm_type", lambda: ALGORITHM_TYPES.get(algo.algorithm_type))
    if preset is not None and preset.unavailable is not None:  # registered, but needs more
        c.issues.append(
            Issue("algorithm.algorithm_type", f"{algo.algorithm_type!r} {preset.unavailable}")
        )
    for key, registry in ALGORITHM_PART_KEYS.items():
        name = getattr(algo, key)
        if name is not None:
            c.look(f"algorithm.{key}", functools.partial(registry.get, name, key=key))
    if len(c.issues) > before:
        return None
    trains = cfg.mode != "bench"  # bench never trains: group sizes do not matter there
    return c.look("algorithm", lambda: resolve_algorithm(algo, check_repeat_times=trains))


def selections(cfg: RftConfig, algorithm: Any, trains_offline: bool) -> Iterator[Selection]:
    """Every config value that selects a registered part, with what its checks are given."""
    from rft.algorithms.aggregation import LOSS_AGG_MODES
    from rft.algorithms.policy_losses import POLICY_LOSS_FN
    from rft.algorithms.presets import ALGORITHM_TYPES
    from rft.buffer.experience_operators import EXPERIENCE_OPERATORS
    from rft.buffer.expert_source import EXPERT_SOURCES
    from rft.buffer.priority_fns import PRIORITY_FNS
    from rft.buffer.sample_strategy import SAMPLE_STRATEGIES, sampler_choice
    from rft.engines.rollout import ROLLOUT_ENGINES
    from rft.engines.trainer import LR_SCHEDULES, TRAINER_ENGINES
    from rft.storage.object_store import OBJECT_STORES
    from rft.supervisor.launchers import LAUNCHERS
    from rft.synchronizer import SYNC_STYLES
    from rft.synchronizer.transport import WEIGHT_TRANSPORTS
    from rft.tools import TOOL_CALL_PARSERS
    from rft.workflows import WORKFLOWS

    if algorithm is not None:
        # rft's buffer.trainer_input.max_staleness folds into the strategy and its args
        chosen, strategy_args = sampler_choice(
            algorithm.sample_strategy,
            cfg.algorithm.sample_strategy_args,
            cfg.buffer.trainer_input.max_staleness,
        )
        at = "algorithm.sample_strategy"
        args = Args(f"{at}_args", strategy_args, frozenset({"setup"}))
        yield Selection(at, SAMPLE_STRATEGIES, chosen, "entry", (cfg, strategy_args), args)
        at = "algorithm.algorithm_type"
        yield Selection(
            at,
            ALGORITHM_TYPES,
            cfg.algorithm.algorithm_type,
            "entry",
            (cfg, algorithm, trains_offline),
        )
        yield Selection(
            "algorithm.policy_loss_fn", POLICY_LOSS_FN, algorithm.policy_loss_fn, given=(cfg,)
        )
        if algorithm.use_critic:
            yield Selection(
                "critic.loss_agg_mode", LOSS_AGG_MODES, cfg.critic.loss_agg_mode, "name"
            )

    trainer_input = cfg.buffer.trainer_input
    replay = trainer_input.experience_buffer.replay_buffer
    at = "buffer.trainer_input.experience_buffer.replay_buffer"
    fixed = frozenset({"model_version", "use_count", "noise"})
    args = Args(f"{at}.priority_fn_args", replay.priority_fn_args, fixed)
    yield Selection(f"{at}.priority_fn", PRIORITY_FNS, replay.priority_fn, "name", args=args)
    for name, aux in trainer_input.auxiliary_buffers.items():
        at = f"buffer.trainer_input.auxiliary_buffers.{name}.storage_type"
        yield Selection(at, EXPERT_SOURCES, aux.storage_type, "name")

    pipeline = "data_processor.experience_pipeline.operators"
    for i, op in enumerate(cfg.data_processor.experience_pipeline.operators):
        at = f"{pipeline}[{i}]"
        args = Args(f"{at}.args", op.args, frozenset({"experiences"}))
        yield Selection(
            f"{at}.name", EXPERIENCE_OPERATORS, op.name, given=(op.args, f"{at}.args"), args=args
        )

    inputs = cfg.buffer.explorer_input
    for key in ("default_workflow_type", "default_eval_workflow_type"):
        yield Selection(f"buffer.explorer_input.{key}", WORKFLOWS, getattr(inputs, key), "name")
    at = "buffer.explorer_input"
    yield from _reward(cfg, at, inputs.default_reward_fn_type, {})
    yield from _tasksets(cfg)

    rollout = cfg.explorer.rollout_model
    at = "explorer.rollout_model"
    policy = (cfg, at, rollout)
    yield Selection(
        f"{at}.engine_type", ROLLOUT_ENGINES, rollout.engine_type, given=policy, section=rollout
    )
    yield Selection(f"{at}.tool_call_parser", TOOL_CALL_PARSERS, rollout.tool_call_parser, "name")
    for i, aux_model in enumerate(cfg.explorer.auxiliary_models):
        at = f"explorer.auxiliary_models[{i}]"
        given = (cfg, at, aux_model)
        yield Selection(
            f"{at}.engine_type", ROLLOUT_ENGINES, aux_model.engine_type, "packaged", given
        )

    yield Selection(
        "trainer.trainer_type", TRAINER_ENGINES, cfg.trainer.engine_name, given=(cfg, algorithm)
    )
    yield Selection(
        "trainer.optim.warmup_style", LR_SCHEDULES, cfg.trainer.optim.warmup_style, "name"
    )
    sync = cfg.synchronizer
    yield Selection("synchronizer.sync_style", SYNC_STYLES, sync.sync_style, "entry", (cfg,))
    yield Selection("synchronizer.sync_method", WEIGHT_TRANSPORTS, sync.sync_method, "packaged")
    yield Selection("cluster.launcher", LAUNCHERS, cfg.cluster.launcher, "entry", (cfg,))
    uri = cfg.stack.object_store.uri
    if uri is not None:
        yield Selection("stack.object_store.uri", OBJECT_STORES, urlparse(uri).scheme, "name")


def _tasksets(cfg: RftConfig) -> Iterator[Selection]:
    """The parts each taskset selects: its workflow (with workflow_args), tool-call parser,
    reward, task selector (with its kwargs) and source."""
    from rft.producers.task_selectors import selector_part
    from rft.producers.taskset_reader import TASKSET_SOURCES
    from rft.tools import TOOL_CALL_PARSERS
    from rft.workflows import WORKFLOWS

    inputs = cfg.buffer.explorer_input
    tasksets = [("buffer.explorer_input.taskset", inputs.taskset)]
    tasksets += [
        (f"buffer.explorer_input.eval_tasksets[{i}]", t) for i, t in enumerate(inputs.eval_tasksets)
    ]
    for path, taskset in tasksets:
        if taskset is None:
            continue
        args = Args(f"{path}.workflow_args", taskset.workflow_args, signature=_workflow_signature)
        yield Selection(
            f"{path}.default_workflow_type",
            WORKFLOWS,
            taskset.default_workflow_type,
            "name",
            args=args,
        )
        parser = taskset.format.tool_call_parser
        yield Selection(f"{path}.format.tool_call_parser", TOOL_CALL_PARSERS, parser, "name")
        yield from _reward(cfg, path, taskset.default_reward_fn_type, taskset.reward_fn_args)
        selector = taskset.task_selector
        fixed = frozenset({"num_rows", "epoch", "seed", "features"})
        args = Args(f"{path}.task_selector.kwargs", selector.kwargs, fixed)
        at = f"{path}.task_selector.selector_type"
        yield Selection(at, None, selector.selector_type, "name", args=args, lookup=selector_part)
        yield Selection(
            f"{path}.storage_type", TASKSET_SOURCES, taskset.storage_type, given=(taskset, path)
        )


def _reward(
    cfg: RftConfig, path: str, name: str | None, args: Mapping[str, Any]
) -> Iterator[Selection]:
    """A reward function (a taskset's own, or explorer_input's, filled in at load): its own
    checks of reward_fn_args (they say what a refused arg should be instead), then every other arg
    against the function's keywords, and its registry's rule (the auxiliary model it asks)."""
    from rft.rewards import AUXILIARY_MODEL_ARG, REWARD_FUNCTIONS

    fixed = frozenset({"response_text", "task_payload", AUXILIARY_MODEL_ARG})
    checked = Args(f"{path}.reward_fn_args", args, fixed)
    yield Selection(
        f"{path}.default_reward_fn_type",
        REWARD_FUNCTIONS,
        name,
        given=(args, path, cfg),
        args=checked,
    )


def _workflow_signature(workflow: Any) -> Any:
    return workflow.workflow_args_signature()


def fill_parts(cfg: RftConfig) -> None:
    """Values that follow from the entries a config selects, in place (the trainer engine's:
    rft.engines.trainer_checks)."""
    from rft.engines.trainer_checks import filled_trainer_type

    filled_trainer_type(cfg)


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
    found, notices = check_parts(cfg, trains_offline)
    issues += found
    return issues, ([] if issues else notices + launcher_notices(cfg))
