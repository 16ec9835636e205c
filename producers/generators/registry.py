"""The task generator registry, `TASK_GENERATORS`: verifiable tasksets made from a seed.

A taskset with `storage_type: generator` and `path: <name>` calls
`fn(seed=..., num_tasks=..., **generator_args) -> GeneratedTaskset`. The same arguments always give
the same rows, so a run can be repeated exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rft.registry import Registry


@dataclass(frozen=True)
class GeneratedTaskset:
    """Generated rows plus the format keys, workflow and reward that suit them."""

    rows: list[dict[str, Any]]
    default_format: dict[str, str] = field(default_factory=dict)
    default_workflow: str = "math_workflow"
    default_reward_fn: str = "math_reward"


TaskGenerator = Callable[..., GeneratedTaskset]

TASK_GENERATORS: Registry[TaskGenerator] = Registry("generator")
# the built-in generators, imported when first looked up
TASK_GENERATORS.lazy("arithmetic", "rft.producers.generators.arithmetic:arithmetic")
TASK_GENERATORS.lazy("countdown", "rft.producers.generators.countdown:countdown")
_ENV = "rft.producers.generators.environment_tasks"
TASK_GENERATORS.lazy("frozen_lake", f"{_ENV}:frozen_lake")
TASK_GENERATORS.lazy("guess_number", f"{_ENV}:guess_number")
TASK_GENERATORS.lazy("multiplication", f"{_ENV}:multiplication")
