"""The workflow registry, `WORKFLOWS`: how a task becomes chat messages and how a reply is scored.

Entries are `Workflow` subclasses, added with `@WORKFLOWS.register("name")`. They are stateless so
one instance serves a whole batch; a single-turn workflow's generation happens once per batch in
`run_workflows`, and a multi-turn one (`drives_model`) drives the model itself through a
`ModelHandle`: frozen_lake, guess_number, multiplication_tool, multiplication (no tools) and
tool_call_workflow (a row's question answered with tools).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rft.registry import Registry

if TYPE_CHECKING:
    from rft.workflows.workflow import Workflow

WORKFLOWS: Registry[type[Workflow]] = Registry("workflow")
# the built-in workflows, imported when first looked up
WORKFLOWS.lazy("math_workflow", "rft.workflows.math_workflow:MathWorkflow")
WORKFLOWS.lazy("simple_workflow", "rft.workflows.simple_workflow:SimpleWorkflow")
WORKFLOWS.lazy("countdown_workflow", "rft.workflows.countdown_workflow:CountdownWorkflow")
_ENV = "rft.workflows.environment_workflows"
WORKFLOWS.lazy("frozen_lake", f"{_ENV}:FrozenLakeWorkflow")
WORKFLOWS.lazy("guess_number", f"{_ENV}:GuessNumberWorkflow")
WORKFLOWS.lazy("multiplication_tool", f"{_ENV}:MultiplicationToolWorkflow")
WORKFLOWS.lazy("multiplication", f"{_ENV}:MultiplicationWorkflow")
WORKFLOWS.lazy("tool_call_workflow", "rft.workflows.tool_call_workflow:ToolCallWorkflow")
