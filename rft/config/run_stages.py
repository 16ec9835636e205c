"""`stages:`: a pipeline of runs in one config (Trinity-RFT's multi-stage runs, e.g. SFT -> GRPO);
this module owns the shape of the list and what a stage may set (pure, no I/O).

Each entry is `stage_name` plus overrides of the top-level sections. A stage's config is the base
config with the stage's overrides merged in (mappings key by key, lists and values replaced),
then the command line's overrides, and it is its own run, named `<name>-<stage_name>`: its own
topics, consumer groups and checkpoints. A later stage starts from the previous stage's last
weight version; the driver that runs the stages (rft.supervisor.stage_pipeline) sets that
stage's `model.model_path` to it. See [Multi-stage runs](stages.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rft.config.binding import Issue

STAGES_KEY = "stages"
STAGE_NAME_KEY = "stage_name"
_STAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
# modes that train, so that the stage ends with a weight version the next one starts from
TRAINING_MODES = ("both", "train")

# top-level keys a stage may not set, and why
FIXED_KEYS: dict[str, str] = {
    "project": "every stage is a run of the config's project",
    "name": "a stage's run is named `<name>-<stage_name>`",
    STAGES_KEY: "stages do not nest",
    "stack": "every stage uses the config's Kafka and object store, where the pipeline "
    "records its progress",
    "checkpoint_root_dir": "the stages share the config's local job directory root",
}
# keys a later stage may not set (a first stage may)
FIRST_STAGE_ONLY: dict[str, str] = {
    "model.model_path": "a later stage starts from the previous stage's last weight version",
}


@dataclass(frozen=True)
class RunStage:
    """One entry of `stages`: its position, name and the keys it overrides (raw YAML data)."""

    index: int
    name: str
    overrides: Mapping[str, Any]

    @property
    def path(self) -> str:
        """Its place in the config: `stages[i]`."""
        return f"{STAGES_KEY}[{self.index}]"

    def run_name(self, base_name: str) -> str:
        """The name of the stage's run."""
        return f"{base_name}-{self.name}"

    def sets(self, path: str) -> bool:
        """Whether this stage's overrides set the key at `path` (dotted, `[i]` indexes allowed)
        or a value above it (a list or value replaces all below it)."""
        node: Any = self.overrides
        for part in re.sub(r"\[\d+\]", "", path).split("."):
            if not isinstance(node, Mapping):
                return True
            if part not in node:
                return False
            node = node[part]
        return True

    def locate(self, path: str) -> str:
        """`path` as the config file has it: under `stages[i]` when the stage sets it."""
        return f"{self.path}.{path}" if self.sets(path) else path


def parse_stages(value: Any) -> tuple[list[RunStage], list[Issue]]:
    """The `stages` list as RunStages, and its problems (each naming `stages[i]...`)."""
    if value is None:
        return [], []
    if not isinstance(value, list):
        return [], [Issue(STAGES_KEY, f"must be a list of stages, got {type(value).__name__}")]
    stages: list[RunStage] = []
    issues: list[Issue] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(value):
        at = f"{STAGES_KEY}[{index}]"
        if not isinstance(entry, Mapping):
            issues.append(Issue(at, "must be a mapping with stage_name and the keys it overrides"))
            continue
        name = entry.get(STAGE_NAME_KEY)
        if not isinstance(name, str) or not _STAGE_NAME.fullmatch(name):
            issues.append(
                Issue(
                    f"{at}.{STAGE_NAME_KEY}",
                    f"must be a name of letters, digits, '_' and '-' (it ends the stage's run "
                    f"name), got {name!r}",
                )
            )
            continue
        if name in seen:
            issues.append(
                Issue(
                    f"{at}.{STAGE_NAME_KEY}",
                    f"{name!r} is already the name of stages[{seen[name]}]",
                )
            )
            continue
        seen[name] = index
        overrides = {k: v for k, v in entry.items() if k != STAGE_NAME_KEY}
        for key, why in FIXED_KEYS.items():
            if key in overrides:
                issues.append(Issue(f"{at}.{key}", f"cannot be set by a stage: {why}"))
        stage = RunStage(index, name, overrides)
        if index > 0:
            for key, why in FIRST_STAGE_ONLY.items():
                if stage.sets(key):
                    issues.append(Issue(f"{at}.{key}", f"cannot be set by a later stage: {why}"))
        stages.append(stage)
    return stages, issues


def select_stage(stages: list[RunStage], name: str) -> RunStage:
    """The stage called `name`; KeyError naming the stages there are."""
    for stage in stages:
        if stage.name == name:
            return stage
    raise KeyError(
        f"no stage named {name!r} (the config's stages: {', '.join(s.name for s in stages)})"
    )


def mode_issue(stage: RunStage, mode: str) -> Issue | None:
    """A stage must train: the next stage starts from its last weight version."""
    if mode in TRAINING_MODES:
        return None
    return Issue(
        "mode",
        f"is {mode!r}; a stage must train (mode {' or '.join(TRAINING_MODES)}): the next stage "
        "starts from its last weight version",
    )
