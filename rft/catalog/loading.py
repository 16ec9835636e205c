"""Loading a run config with every load-time check: `load_config` is the one way a config enters
rft (the CLI's commands, `rft run` and the processes it starts all call it).

rft.config binds the keys and applies the pure cross-key rules; the stages here add what needs the
rest of the system: plugins, the registered parts a config selects (each entry's own checks), the
launcher's word on placement, and the run-length rules (the taskset's task count).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rft.catalog.parts import parts_stage
from rft.catalog.run_length import run_length_stage
from rft.config.loader import LoadStage, read_config, read_config_dict, read_pipeline
from rft.config.run_stages import RunStage
from rft.config.schema import RftConfig


def load_stages(*, trains_offline: bool = False) -> list[LoadStage]:
    """The stages after binding. `trains_offline` (`rft train --from-topic`) leaves out the
    run-length rules: an offline trainer reads an existing topic, so neither the taskset nor the
    staleness bound applies (nor a dataset file: the topic is the input)."""
    if trains_offline:
        return [functools.partial(parts_stage, trains_offline=True)]
    return [parts_stage, run_length_stage]


def load_config(
    path: str | Path,
    overrides: Sequence[str] = (),
    *,
    before_parts: Callable[[RftConfig], None] | None = None,
    trains_offline: bool = False,
    run_stage: str | None = None,
) -> RftConfig:
    """Read a YAML run config, apply dotlist `overrides` (`algorithm.repeat_times=8`), check it.

    `${oc.env:VAR,default}` and `${a.b}` interpolations are resolved. Raises ConfigError.
    `before_parts` sees the bound config before plugins and the registries' modules are imported
    (they import torch): the place to act on settings read when a library starts (env_vars).
    A config with `stages:` is read one stage at a time: `run_stage` names it (`--stage`).
    """
    stages = load_stages(trains_offline=trains_offline)
    return read_config(
        path, overrides, stages=stages, before_parts=before_parts, run_stage=run_stage
    )


def load_pipeline(
    path: str | Path,
    overrides: Sequence[str] = (),
    *,
    before_parts: Callable[[RftConfig], None] | None = None,
) -> list[tuple[RunStage | None, RftConfig]]:
    """Every stage of a config with `stages:`, each checked as `load_config` checks a run, all
    before any runs (one error lists the problems of every stage); `[(None, config)]` for a
    config without stages."""
    return read_pipeline(path, overrides, stages=load_stages(), before_parts=before_parts)


def config_from_dict(
    data: Mapping[str, Any], overrides: Sequence[str] = (), source: str = "<dict>"
) -> RftConfig:
    """Like `load_config`, for a config already in memory (interpolations still resolve)."""
    return read_config_dict(data, overrides, source, stages=load_stages())
