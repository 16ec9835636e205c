"""Workflows: the `WORKFLOWS` registry and the built-in workflows.

Importing this package registers `math_workflow`, `simple_workflow` and `countdown_workflow`. The
batch runner (`rft.workflows.runner`) is imported on its own: it needs the rollout engines (torch),
which publishers and supervisors never load.
"""

from __future__ import annotations

from rft.workflows import countdown_workflow, math_workflow, simple_workflow  # noqa: F401
from rft.workflows.registry import WORKFLOWS
from rft.workflows.workflow import Workflow

__all__ = ["WORKFLOWS", "Workflow"]
