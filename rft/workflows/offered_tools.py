"""`offer_tools`: the tools a task's rollout offers, with the executor and parser that serve them.

The tools are the row's `format.tools_key` column when the taskset names one (tool names, or OpenAI
function specs naming registered tools, as Trinity's rows hold them), else the workflow's
`workflow_args.tools`, else the workflow's default. Replies are read with the format's
`tool_call_parser` (default hermes); each call runs in a `ToolExecutor` bounded by `tool_timeout_s`.
`tool_call_reward` (default 0) is reward shaping for a model that does not call tools yet: it is
added to the reward of a rollout in which at least one call ran (see `rft.workflows.multi_turn`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from rft.errors import ConfigError, TasksetError
from rft.events.models import Task
from rft.tools import TOOL_CALL_PARSERS, ToolExecutor
from rft.workflows.multi_turn import Episode

_Param = inspect.Parameter
# the workflow_args of a workflow that offers tools
TOOL_PARAMS = [
    _Param("tools", _Param.KEYWORD_ONLY, default=None, annotation="list[str] | None"),
    _Param("tool_timeout_s", _Param.KEYWORD_ONLY, default=30.0, annotation="float"),
    _Param("tool_call_reward", _Param.KEYWORD_ONLY, default=0.0, annotation="float"),
]


def offer_tools(
    episode: Episode, task: Task, args: Mapping[str, Any], default: Sequence[str]
) -> Episode:
    """`episode` offering the task's tools (see the module docstring)."""
    names = tool_names(task, args, default)
    executor = ToolExecutor.offering(
        names, key="workflow_args.tools", timeout_s=float(args.get("tool_timeout_s", 30.0))
    )
    episode.executor = executor
    episode.tools = [entry.spec() for entry in executor.tools.values()]
    parser_name = task.format.get("tool_call_parser") or "hermes"
    episode.parser = TOOL_CALL_PARSERS.get(parser_name, key="format.tool_call_parser")
    episode.call_reward = float(args.get("tool_call_reward", 0.0))
    if episode.call_reward < 0:
        raise ConfigError(
            f"workflow_args.tool_call_reward must be 0 or above, got {episode.call_reward!r}"
        )
    return episode


def tools_column_problem(payload: Mapping[str, Any], fmt: Mapping[str, str]) -> str | None:
    """Why a row's `tools_key` column cannot name its tools, or None."""
    tools_key = fmt.get("tools_key")
    if not tools_key:
        return None
    listed = payload.get(tools_key)
    if not isinstance(listed, list) or any(_tool_name(entry) is None for entry in listed):
        return (
            f"tools_key {tools_key!r} must name a list column of tool names or OpenAI "
            "function specs"
        )
    return None


def tool_names(task: Task, args: Mapping[str, Any], default: Sequence[str]) -> list[str]:
    problem = tools_column_problem(task.payload, task.format)
    if problem:
        raise TasksetError(f"task {task.task_id}: {problem}")
    tools_key = task.format.get("tools_key")
    if tools_key:
        return [str(_tool_name(entry)) for entry in task.payload[tools_key]]
    return list(args.get("tools") or default)


def _tool_name(entry: object) -> str | None:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict):
        function = entry.get("function", entry)
        name = function.get("name") if isinstance(function, dict) else None
        return name if isinstance(name, str) else None
    return None
