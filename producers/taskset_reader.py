"""Loads a configured taskset into validated rows: the `TASKSET_SOURCES` registry (`file`,
`generator`) plus the bad-row policy.

Bad-row policy (`on_bad_rows`): "fail" (the default) reads and checks every row first and raises
BadTasksetError listing every bad `file:line` if there is any, so nothing gets published;
"skip-and-report" keeps the good rows and returns each bad one in `LoadedTaskset.bad_rows`, for the
caller to report. Either way no row is dropped silently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from rft.config.binding import Issue
from rft.config.schema import TasksetConfig
from rft.datasets.files import file_rows
from rft.datasets.rows import BadRow, TasksetRow
from rft.errors import ConfigError, TasksetError
from rft.producers.generators import TASK_GENERATORS
from rft.registry import Registry, argument_issues
from rft.rewards import REWARD_FUNCTIONS
from rft.workflows import WORKFLOWS

BadRowPolicy = Literal["fail", "skip-and-report"]
BAD_ROW_POLICIES: tuple[str, ...] = get_args(BadRowPolicy)
FALLBACK_WORKFLOW = "math_workflow"


@dataclass(frozen=True)
class TasksetSource:
    """Rows from one source, plus the format/workflow/reward that suit them (for generators)."""

    rows: Iterable[TasksetRow | BadRow]
    default_format: dict[str, str] = field(default_factory=dict)
    default_workflow: str | None = None
    default_reward_fn: str | None = None


TasksetSourceFn = Callable[[TasksetConfig], TasksetSource]
TASKSET_SOURCES: Registry[TasksetSourceFn] = Registry("storage_type")


@TASKSET_SOURCES.register("file")
def file_source(taskset: TasksetConfig) -> TasksetSource:
    """A JSONL/JSON/Parquet/Arrow file, or a local Hugging Face dataset directory."""
    return TasksetSource(file_rows(taskset))


def generator_issues(taskset: TasksetConfig, path: str) -> list[Issue]:
    """The `generator` source's load-time check: `path` names a registered generator that
    accepts `generator_args`."""
    try:
        generator = TASK_GENERATORS.get(taskset.path)
    except ConfigError as exc:
        return [Issue(f"{path}.path", str(exc))]
    found = argument_issues(f"{path}.generator_args", generator, taskset.generator_args)
    return [Issue(key, problem) for key, problem in found]


@TASKSET_SOURCES.register("generator", check=generator_issues)
def generator_source(taskset: TasksetConfig) -> TasksetSource:
    """A registered generator named by `path`, called with `generator_args`."""
    generator = TASK_GENERATORS.get(taskset.path)
    try:
        generated = generator(**taskset.generator_args)
    except TypeError as exc:
        raise ConfigError(
            f"taskset {taskset.name!r} generator_args for {taskset.path!r}: {exc}"
        ) from exc
    rows = [
        TasksetRow(i, row, f"generator:{taskset.path}#{i}") for i, row in enumerate(generated.rows)
    ]
    return TasksetSource(
        rows,
        default_format=generated.default_format,
        default_workflow=generated.default_workflow,
        default_reward_fn=generated.default_reward_fn,
    )


@dataclass
class LoadedTaskset:
    """A validated taskset, ready to become Task events."""

    name: str
    rows: list[TasksetRow]
    bad_rows: list[BadRow]
    format: dict[str, str]
    workflow: str
    reward_fn: str
    repeat_times: int
    rollout_args: dict[str, Any]
    is_eval: bool
    selector: str = "sequential"  # a name in rft.producers.task_selectors' registries
    selector_args: dict[str, Any] = field(default_factory=dict)
    # per row (aligned with `rows`): its values of task_selector.feature_keys; None without keys
    selector_features: list[tuple[float, ...]] | None = None


class BadTasksetError(TasksetError):
    """A taskset has bad rows under the "fail" policy; `bad_rows` lists every one."""

    def __init__(self, taskset: str, bad_rows: list[BadRow]) -> None:
        self.bad_rows = bad_rows
        listed = "\n".join(f"  {bad}" for bad in bad_rows)
        super().__init__(
            f"taskset {taskset!r}: {len(bad_rows)} bad row(s), nothing published "
            f"(use on_bad_rows 'skip-and-report' to publish the rest):\n{listed}"
        )


def count_tasks(taskset: TasksetConfig) -> int | None:
    """The rows `taskset` gives per epoch (read or generated now; bad rows left out, which the
    publisher refuses anyway), or None when it cannot be read here: that is reported when the
    taskset is published."""
    try:
        return len(load_taskset(taskset, on_bad_rows="skip-and-report").rows)
    except (TasksetError, ConfigError, OSError):
        return None


def load_taskset(
    taskset: TasksetConfig, *, is_eval: bool = False, on_bad_rows: str = "fail"
) -> LoadedTaskset:
    """Read and validate every row of `taskset` under the bad-row policy."""
    if on_bad_rows not in BAD_ROW_POLICIES:
        raise ConfigError(f"on_bad_rows must be one of {BAD_ROW_POLICIES}, got {on_bad_rows!r}")
    source = TASKSET_SOURCES.get(taskset.storage_type)(taskset)
    raw_rows = list(source.rows)

    first = next((r.payload for r in raw_rows if isinstance(r, TasksetRow)), {})
    fmt = task_format(taskset, source.default_format, first)
    workflow_name = taskset.default_workflow_type or source.default_workflow or FALLBACK_WORKFLOW
    workflow = WORKFLOWS.get(workflow_name)()
    accepts = workflow.workflow_args_signature()
    if accepts is not None and taskset.workflow_args:
        found = argument_issues(
            f"taskset {taskset.name!r} workflow_args", accepts, taskset.workflow_args
        )
        if found:
            raise ConfigError("; ".join(f"{key} {problem}" for key, problem in found))
    reward_fn = (
        taskset.default_reward_fn_type or source.default_reward_fn or workflow.default_reward_fn
    )
    REWARD_FUNCTIONS.get(reward_fn)  # an unknown name fails before any row is read further

    rows: list[TasksetRow] = []
    bad_rows: list[BadRow] = []
    for row in raw_rows:
        if isinstance(row, BadRow):
            bad_rows.append(row)
            continue
        problem = workflow.check_payload(row.payload, fmt) or feature_problem(
            row.payload, taskset.task_selector.feature_keys
        )
        if problem:
            bad_rows.append(BadRow(row.index, row.origin, problem))
        else:
            rows.append(row)
    if bad_rows and on_bad_rows == "fail":
        raise BadTasksetError(taskset.name, bad_rows)
    if not rows:
        where = f"{taskset.storage_type} {taskset.path}"
        raise TasksetError(f"taskset {taskset.name!r} ({where}) has no usable rows")
    return LoadedTaskset(
        name=taskset.name,
        rows=rows,
        bad_rows=bad_rows,
        format=fmt,
        workflow=workflow_name,
        reward_fn=reward_fn,
        repeat_times=taskset.repeat_times or 1,
        rollout_args={k: v for k, v in taskset.rollout_args.as_dict().items() if v is not None},
        is_eval=is_eval,
        selector=taskset.task_selector.selector_type,
        selector_args=dict(taskset.task_selector.kwargs),
        selector_features=selector_features(rows, taskset.task_selector.feature_keys),
    )


def feature_problem(payload: dict[str, Any], feature_keys: list[str]) -> str | None:
    """Why a row cannot serve its selector's feature columns (missing or not a number)."""
    for key in feature_keys:
        value = payload.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"task_selector.feature_keys: column {key!r} must be a number, got {value!r}"
        if not math.isfinite(value):
            return f"task_selector.feature_keys: column {key!r} must be finite, got {value!r}"
    return None


def selector_features(
    rows: list[TasksetRow], feature_keys: list[str]
) -> list[tuple[float, ...]] | None:
    if not feature_keys:
        return None
    return [tuple(float(r.payload[k]) for k in feature_keys) for r in rows]


def task_format(
    taskset: TasksetConfig, defaults: dict[str, str], sample_row: dict[str, Any]
) -> dict[str, str]:
    """The format map Task events carry.

    A format key naming a column the (generated) rows lack is pointed at the source's default
    column, so a generator works with the stock format. `workflow_args` and `reward_fn_args` ride
    along as JSON object text.
    """
    fmt = taskset.format.as_task_format()
    for key, column in defaults.items():
        if fmt.get(key) not in sample_row:
            fmt[key] = column
    for key in ("workflow_args", "reward_fn_args"):
        value = getattr(taskset, key)
        if value:
            fmt[key] = json.dumps(value, sort_keys=True)
    return fmt
