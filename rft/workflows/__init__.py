"""Workflows: the `WORKFLOWS` registry, the built-in workflows and the batch runner.

Importing this package registers `math_workflow`, `simple_workflow` and `countdown_workflow`.
"""

from __future__ import annotations

from rft.workflows import countdown_workflow, math_workflow, simple_workflow  # noqa: F401
from rft.workflows.registry import WORKFLOWS
from rft.workflows.runner import (
    RejectedTasksError,
    WorkflowResult,
    run_workflows,
    sampling_params_for,
    split_runnable,
    workflow_for,
)
from rft.workflows.workflow import Workflow

__all__ = [
    "WORKFLOWS",
    "RejectedTasksError",
    "Workflow",
    "WorkflowResult",
    "run_workflows",
    "sampling_params_for",
    "split_runnable",
    "workflow_for",
]
