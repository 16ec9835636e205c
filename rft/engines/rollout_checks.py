"""The load-time rule every rollout engine answers to (`ROLLOUT_ENGINES`' rule), read off its spec.

An engine is selected for the policy (`explorer.rollout_model`) or for an auxiliary model (an
entry of `explorer.auxiliary_models`). Either section may set only what the engine reads: the
server settings (base_url, api_key) only for an engine that calls a server, `engine_args` only
among the engine's args. An auxiliary model needs an engine that can serve one, and a model_path
only where the engine loads weights; the policy's engine must apply adapter versions when the
config trains LoRA. The rule is given the config, the key path of the section and the section.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from rft.config.binding import Issue
from rft.engines.rollout import ROLLOUT_ENGINES, RolloutEngineSpec
from rft.registry import load_dotted

POLICY = "explorer.rollout_model"
# the settings of a server an engine calls, read only by an engine whose spec `reads` them
SERVER_KEYS = ("base_url", "api_key")


def engine_issues(
    name: str, spec: RolloutEngineSpec, cfg: Any, at: str, section: Any
) -> list[Issue]:
    """Every problem of serving `section` (the policy's or an auxiliary model's) with `name`."""
    if at == POLICY:
        issues = unread_settings(spec, at, section, spec.args, f"engine {name!r}")
        if cfg.model.lora_configs and cfg.mode != "train" and not spec.lora:
            lora_able = ", ".join(ROLLOUT_ENGINES.having(lambda s: s.lora))
            issues.append(
                Issue(
                    "model.lora_configs",
                    f"rollout engine {name!r} cannot apply adapter versions (engines that "
                    f"can: {lora_able})",
                )
            )
        return issues
    if spec.auxiliary is None:
        able = ", ".join(ROLLOUT_ENGINES.having(lambda s: s.auxiliary is not None))
        return [
            Issue(
                f"{at}.engine_type",
                f"{name!r} cannot serve an auxiliary model (engines that can: {able})",
            )
        ]
    issues = []
    if "base_url" in spec.reads and not section.base_url:
        issues.append(
            Issue(f"{at}.base_url", f"is required by engine_type {name} (e.g. http://host:8000/v1)")
        )
    if section.model_path is not None and not spec.loads_weights:
        issues.append(
            Issue(
                f"{at}.model_path",
                f"is not read by engine {name!r}: its model lives in the server "
                "(name its id with engine_args.model)",
            )
        )
    own = spec.args + tuple(k for k in spec.reads if k not in SERVER_KEYS)
    if spec.keys is not None:  # an auxiliary model gives the engine's own keys as engine_args
        own += tuple(f.name for f in dataclasses.fields(load_dotted(spec.keys)))
    takes = own if spec.auxiliary_args is None else spec.auxiliary_args
    what = f"an auxiliary model of engine {name!r}"
    return issues + unread_settings(spec, at, section, takes, what)


def unread_settings(
    spec: RolloutEngineSpec, at: str, section: Any, takes: Sequence[str], what: str
) -> list[Issue]:
    """Issues at `at` for a server setting of `section` that the engine does not read, and for
    each of its engine_args that `what` does not take (`takes`)."""
    issues = [
        Issue(
            f"{at}.{key}",
            f"is not read by {what}: only an engine that calls a server reads it "
            "(engine_type openai)",
        )
        for key in SERVER_KEYS
        if getattr(section, key) is not None and key not in spec.reads
    ]
    issues += [
        Issue(
            f"{at}.engine_args.{key}",
            f"is not read by {what} (it reads: {', '.join(takes) or 'nothing'})",
        )
        for key in section.engine_args
        if key not in takes
    ]
    return issues
