"""`tool_task(name)`: the one registration of a tool task, as its workflows and its taskset.

    @tool_task("unit_conversion")
    class UnitConversion(ToolTask[...]): ...

registers the environment and the workflows `unit_conversion` (tools offered) and
`unit_conversion_no_tools` (the baseline; `rft.workflows.tool_tasks.register_tool_task`), and the
generator `unit_conversion`: `fn(seed=0, num_tasks=100, split="train")`, one task per seed of the
split (`environment_tasks.seed_generator`), played with the tools unless the taskset's
`default_workflow_type` names the baseline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from rft.environments.tool_task import Call, ToolTask, call
from rft.producers.generators.environment_tasks import seed_generator
from rft.producers.generators.registry import TASK_GENERATORS
from rft.workflows.tool_tasks import register_tool_task

__all__ = ["Call", "ToolTask", "call", "tool_task"]

T = TypeVar("T", bound=type[ToolTask[Any]])


def tool_task(name: str) -> Callable[[T], T]:
    """Class decorator: register a `ToolTask` subclass under `name` (see the module docstring)."""

    def decorate(cls: T) -> T:
        register_tool_task(name, cls)
        TASK_GENERATORS.add(name, seed_generator(name))
        return cls

    return decorate
