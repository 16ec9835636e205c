"""Workflows: the `WORKFLOWS` registry and the built-in workflows.

The built-in `math_workflow`, `simple_workflow` and `countdown_workflow` are declared in the
registry by dotted path and imported when first looked up. The
batch runner (`rft.workflows.runner`) is imported on its own: it needs the rollout engines (torch),
which publishers and supervisors never load.
"""

from __future__ import annotations

from rft.workflows.registry import WORKFLOWS
from rft.workflows.workflow import Workflow

__all__ = ["WORKFLOWS", "Workflow"]
