"""The workflows of a tool task (`rft.environments.tool_task.ToolTask`), and its registration.

`register_tool_task(name, cls)` adds, from the one class:
- the environment `name` (ENVIRONMENTS), whose settings are the class's keyword parameters;
- the workflow `name` (WORKFLOWS): the task with its tools offered, calls read with the format's
  `tool_call_parser` and answered by the `ToolExecutor`, the verdict on the first reply without a
  call (an `EnvironmentWorkflow`, so its `workflow_args` are the environment's settings plus
  the turn and tool limits);
- the workflow `<name>_no_tools`: the same problems with no tool offered and one turn, the
  baseline a run's evals compare with.

The oracle's demonstrations are played through the first workflow by
`rft.workflows.demonstrations`. The taskset generator of the same name is added by
`rft.producers.generators.tool_tasks.tool_task`, which calls this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from rft.environments import ENVIRONMENTS
from rft.environments.tool_task import ToolTask, environment_factory
from rft.workflows.environment_workflows import EnvironmentWorkflow
from rft.workflows.registry import WORKFLOWS

NO_TOOLS_SUFFIX = "_no_tools"

T = TypeVar("T", bound=type[ToolTask[Any]])


class ToolTaskWorkflow(EnvironmentWorkflow):
    """A tool task with its tools offered."""

    offers_tools = True
    fixed_settings: ClassVar[Mapping[str, Any]] = {"with_tools": True}
    task_class: ClassVar[type[ToolTask[Any]]]


class NoToolsWorkflow(EnvironmentWorkflow):
    """A tool task's problems answered without tools, in one turn: the baseline."""

    fixed_settings: ClassVar[Mapping[str, Any]] = {"with_tools": False}


def register_tool_task(name: str, cls: T) -> T:
    """Register tool task `cls` as environment `name` and workflows `name` and `name_no_tools`
    (see the module docstring); it returns `cls` as is."""
    ENVIRONMENTS.add(name, environment_factory(name, cls))
    title = cls.__name__
    with_tools = type(
        f"{title}Workflow",
        (ToolTaskWorkflow,),
        {"environment": name, "task_class": cls, "__module__": cls.__module__},
    )
    without = type(
        f"{title}NoToolsWorkflow",
        (NoToolsWorkflow,),
        {"environment": name, "__module__": cls.__module__},
    )
    WORKFLOWS.add(name, with_tools)
    WORKFLOWS.add(name + NO_TOOLS_SUFFIX, without)
    return cls
