"""The workflow registry, `WORKFLOWS`: how a task becomes chat messages and how a reply is scored.

Entries are `Workflow` subclasses, added with `@WORKFLOWS.register("name")`. They are stateless so
one instance serves a whole batch; generation itself happens once per batch in `run_workflows`.
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
