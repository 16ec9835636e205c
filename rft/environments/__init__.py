"""Environments for multi-turn workflows: the `ENVIRONMENTS` registry, its protocol, seed splits.

Importing this package registers `frozen_lake`, `guess_number` and `multiplication` (a tool task
for the calculator). Every environment is generated offline from its seed; seeds below
`EVAL_SEED_START` are for training and the rest are held out for evaluation (`split_seeds`).
A tool task of one's own is a `rft.environments.tool_task.ToolTask` subclass (docs/extending.md).
"""

from __future__ import annotations

from rft.environments import frozen_lake, guess_number, multiplication  # noqa: F401  (registers)
from rft.environments.protocol import (
    ENVIRONMENTS,
    Environment,
    EnvironmentStateError,
    StepResult,
)
from rft.environments.seed_splits import EVAL_SEED_START, SEED_LIMIT, split_of, split_seeds

__all__ = [
    "ENVIRONMENTS",
    "EVAL_SEED_START",
    "SEED_LIMIT",
    "Environment",
    "EnvironmentStateError",
    "StepResult",
    "split_of",
    "split_seeds",
]
