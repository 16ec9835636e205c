"""Reading a run config: YAML + OmegaConf interpolation + dotlist overrides -> checked RftConfig.

`read_config` binds the keys, fills derived defaults and applies the pure cross-key rules, then
runs the `stages` its caller passes: the checks of the registered parts a config selects live
above this layer (`rft.catalog.load_config`, the one way a config enters rft, passes them).
A config with `stages:` is read one stage at a time, or all of them
at once (`read_pipeline`), each stage the base config with its overrides (rft.config.run_stages).
Problems raise ConfigValidationError naming the key path, the file and line (or the override),
what was given and what was expected. Unknown keys and Trinity-RFT keys that rft ignores only warn
(ConfigWarning), so carried-over YAML still loads.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rft.config.binding import MISSING_VALUE, ConfigBinder, Issue, Notice
from rft.config.derived import check_consistency, fill_derived, value_notices
from rft.config.key_locator import KeyLocator
from rft.config.run_stages import STAGES_KEY, RunStage, mode_issue, parse_stages, select_stage
from rft.config.schema import RftConfig
from rft.errors import ConfigError

# Trinity-RFT keys that moved: the old place is read into the new one (the new one wins).
MOVED_SECTIONS: dict[str, str] = {"algorithm.optimizer": "trainer.optim"}


# A load stage after binding: (the config, the config file's folder) -> (issues, notices). Its
# issues stop the load before the next stage runs; its notices are warned once all stages passed.
LoadStage = Callable[[RftConfig, Path | None], tuple[list[Issue], list[Notice]]]


class StagedConfigError(ConfigError):
    """A config with `stages:` was read as one run, without naming the stage."""


class ConfigWarning(UserWarning):
    """A config key is unknown (with a close-match suggestion) or accepted but ignored."""


class ConfigValidationError(ConfigError):
    """The config has one or more invalid values; `problems` lists them with their places."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        if len(problems) == 1:
            text = str(problems[0])
        else:
            text = f"{len(problems)} problems in the config:\n" + "\n".join(
                f"  - {p}" for p in problems
            )
        super().__init__(text)


@dataclass(frozen=True)
class Problem:
    """An issue placed in its source: `where` is `file:line`, `file` or an override."""

    path: str
    message: str
    where: str

    def __str__(self) -> str:
        return f"{self.where}: `{self.path}` {self.message}"


class _Source:
    """Where the config's keys were written: a file (with lines) and the command-line overrides."""

    def __init__(self, name: str, text: str | None, overrides: Sequence[str]) -> None:
        self.name = name
        self.locator = KeyLocator(text) if text is not None else None
        self.overrides = {o.split("=", 1)[0].strip(): o for o in overrides}

    def where(self, path: str) -> str:
        for key, override in self.overrides.items():
            if path == key or path.startswith(key + ".") or path.startswith(key + "["):
                return f"override {override!r}"
        line = self.locator.line_of(path) if self.locator is not None else None
        return f"{self.name}:{line}" if line is not None else self.name

    def place(self, issues: list[Issue]) -> list[Problem]:
        return [Problem(i.path, i.message, self.where(i.path)) for i in issues]


class _StageSource(_Source):
    """The places of one stage's keys: `stages[i].key` where the stage sets the key; a key that
    comes from the base config keeps its place and its problem names the stage."""

    def __init__(self, base: _Source, stage: RunStage) -> None:
        self.name, self.locator, self.overrides = base.name, base.locator, base.overrides
        self.stage = stage

    def where(self, path: str) -> str:
        return super().where(self.stage.locate(path))

    def place(self, issues: list[Issue]) -> list[Problem]:
        out = []
        for issue in issues:
            path = self.stage.locate(issue.path)
            message = issue.message
            if path == issue.path:
                message += f" (in stage {self.stage.path}, {self.stage.name!r})"
            out.append(Problem(path, message, super().where(path)))
        return out


def read_config(
    path: str | Path,
    overrides: Sequence[str] = (),
    *,
    stages: Sequence[LoadStage],
    before_parts: Callable[[RftConfig], None] | None = None,
    run_stage: str | None = None,
) -> RftConfig:
    """Read a YAML run config, apply dotlist `overrides` (`algorithm.repeat_times=8`), check it.

    `${oc.env:VAR,default}` and `${a.b}` interpolations are resolved. Raises ConfigError.
    `before_parts` sees the bound config before the `stages` run (they import the registries'
    modules, and those import torch): the place to act on settings read when a library starts.
    A config with `stages:` is read one stage at a time: `run_stage` names the stage
    (rft.config.run_stages); `read_pipeline` reads them all.
    """
    base, source, file = _read_file(path, overrides)
    base, run_stages = _split_stages(base, source)
    if not run_stages:
        if run_stage is not None:
            raise ConfigError(
                f"{file}: stage {run_stage!r} asked for, but the config has no stages"
            )
        return _build(
            base, source, overrides, stages, base_dir=file.parent, before_parts=before_parts
        )
    if run_stage is None:
        raise StagedConfigError(
            f"{file} has stages ({', '.join(s.name for s in run_stages)}): `rft run` runs them in "
            "order; other verbs read one stage, named with --stage NAME"
        )
    try:
        stage = select_stage(run_stages, run_stage)
    except KeyError as exc:
        raise ConfigError(f"{file}: {exc.args[0]}") from None
    return _build(
        _stage_base(base, stage),
        _StageSource(source, stage),
        overrides,
        stages,
        base_dir=file.parent,
        before_parts=before_parts,
        run_stage=stage,
    )


def read_pipeline(
    path: str | Path,
    overrides: Sequence[str] = (),
    *,
    stages: Sequence[LoadStage],
    before_parts: Callable[[RftConfig], None] | None = None,
) -> list[tuple[RunStage | None, RftConfig]]:
    """Every stage of the config, each read and checked as `read_config` reads one, before any
    of them runs: the problems of all stages are raised together. A config without `stages:` is
    one run: `[(None, its config)]`."""
    base, source, file = _read_file(path, overrides)
    base, run_stages = _split_stages(base, source)
    if not run_stages:
        cfg = _build(
            base, source, overrides, stages, base_dir=file.parent, before_parts=before_parts
        )
        return [(None, cfg)]
    out: list[tuple[RunStage | None, RftConfig]] = []
    problems: list[Problem] = []
    for stage in run_stages:
        try:
            cfg = _build(
                _stage_base(base, stage),
                _StageSource(source, stage),
                overrides,
                stages,
                base_dir=file.parent,
                before_parts=before_parts,
                run_stage=stage,
            )
        except ConfigValidationError as exc:
            problems += exc.problems
            continue
        out.append((stage, cfg))
    if problems:
        raise ConfigValidationError(problems)
    return out


def _read_file(path: str | Path, overrides: Sequence[str]) -> tuple[DictConfig, _Source, Path]:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror or exc}") from exc
    try:
        base = OmegaConf.create(text) if text.strip() else OmegaConf.create({})
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}" if mark is not None else str(file)
        raise ConfigError(f"{where}: not valid YAML: {exc}") from exc
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{file}: cannot be read as a config: {exc}") from exc
    if not isinstance(base, DictConfig):
        raise ConfigError(f"{file}: the top level must be a mapping of sections, not a list")
    return base, _Source(str(file), text, overrides), file


def _split_stages(base: DictConfig, source: _Source) -> tuple[DictConfig, list[RunStage]]:
    """The config without its `stages` key, and the stages it lists (checked)."""
    for key, override in source.overrides.items():
        if key == STAGES_KEY or key.startswith((f"{STAGES_KEY}.", f"{STAGES_KEY}[")):
            raise ConfigError(
                f"override {override!r}: stages are set in the config file; an override applies "
                "to every stage (e.g. buffer.total_steps=2)"
            )
    if STAGES_KEY not in base:
        return base, []
    raw = OmegaConf.to_container(base[STAGES_KEY], resolve=False)
    run_stages, issues = parse_stages(raw)
    if issues:
        raise ConfigValidationError(source.place(issues))
    rest = base.copy()
    del rest[STAGES_KEY]
    return rest, run_stages


def _stage_base(base: DictConfig, stage: RunStage) -> DictConfig:
    merged = OmegaConf.merge(base, OmegaConf.create(dict(stage.overrides)))
    assert isinstance(merged, DictConfig)
    return merged


def read_config_dict(
    data: Mapping[str, Any],
    overrides: Sequence[str] = (),
    source: str = "<dict>",
    *,
    stages: Sequence[LoadStage],
) -> RftConfig:
    """Like `read_config`, for a config already in memory (interpolations still resolve)."""
    try:
        base = OmegaConf.create(dict(data))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{source}: cannot be read as a config: {exc}") from exc
    if STAGES_KEY in base:
        raise ConfigError(f"{source}: a config with stages is read from its file (rft run)")
    return _build(base, _Source(source, None, overrides), overrides, stages)


def _build(
    base: DictConfig,
    source: _Source,
    overrides: Sequence[str],
    stages: Sequence[LoadStage],
    base_dir: Path | None = None,
    before_parts: Callable[[RftConfig], None] | None = None,
    run_stage: RunStage | None = None,
) -> RftConfig:
    merged = _apply_overrides(base, overrides)
    try:
        raw = OmegaConf.to_container(merged, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as exc:
        key = str(getattr(exc, "full_key", "") or "")
        reason = (str(getattr(exc, "msg", None) or exc).splitlines() or ["?"])[0]
        reason = reason.replace("KeyError raised while resolving interpolation: ", "")
        if "MissingMandatoryValue" in type(exc).__name__:
            reason = "is required (the value is '???')"
        elif key:
            reason = f"cannot be resolved: {reason}"
        problem = Problem(key or "<root>", reason, source.where(key) if key else source.name)
        raise ConfigValidationError([problem]) from exc
    assert isinstance(raw, dict)
    _move_sections(raw)
    if run_stage is not None and isinstance(raw.get("name"), str):
        raw["name"] = run_stage.run_name(raw["name"])

    binder = ConfigBinder()
    cfg = binder.bind(RftConfig, raw)
    for notice in binder.notices:
        warnings.warn(f"{source.where(notice.path)}: {notice.message}", ConfigWarning, stacklevel=4)
    if binder.issues or cfg is MISSING_VALUE:
        raise ConfigValidationError(source.place(binder.issues))
    fill_derived(cfg)
    issues = check_consistency(cfg)
    if run_stage is not None:
        issues += [i for i in [mode_issue(run_stage, cfg.mode)] if i is not None]
    if issues:
        raise ConfigValidationError(source.place(issues))
    if before_parts is not None:
        before_parts(cfg)
    notices: list[Notice] = []
    for stage in stages:
        issues, said = stage(cfg, base_dir)
        if issues:
            raise ConfigValidationError(source.place(issues))
        notices += said
    for notice in value_notices(cfg) + notices:
        warnings.warn(f"{source.where(notice.path)}: {notice.message}", ConfigWarning, stacklevel=4)
    return cfg


def _apply_overrides(base: DictConfig, overrides: Sequence[str]) -> DictConfig:
    merged: Any = base
    for override in overrides:
        if "=" not in override or not override.split("=", 1)[0].strip():
            raise ConfigError(
                f"override {override!r} is not of the form key.path=value "
                "(e.g. algorithm.repeat_times=8)"
            )
        try:
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist([override]))
        except OmegaConfBaseException as exc:
            raise ConfigError(f"override {override!r} cannot be applied: {exc}") from exc
    assert isinstance(merged, DictConfig)
    return merged


def _move_sections(raw: dict[Any, Any]) -> None:
    for old, new in MOVED_SECTIONS.items():
        old_parent, old_key = _parent(raw, old, create=False)
        if old_parent is None or old_key not in old_parent:
            continue
        moved = old_parent.pop(old_key)
        new_parent, new_key = _parent(raw, new, create=True)
        assert new_parent is not None
        current = new_parent.get(new_key)
        if isinstance(moved, dict) and isinstance(current, dict):
            new_parent[new_key] = {**moved, **current}
        elif current is None:
            new_parent[new_key] = moved


def _parent(raw: dict[Any, Any], dotted: str, create: bool) -> tuple[dict[Any, Any] | None, str]:
    *parents, last = dotted.split(".")
    node: Any = raw
    for part in parents:
        if not isinstance(node, dict):
            return None, last
        if part not in node and create:
            node[part] = {}
        node = node.get(part)
    return (node if isinstance(node, dict) else None), last
