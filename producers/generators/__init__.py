"""Generators of verifiable tasksets; importing this package registers the built-in ones.

Add one with `@TASK_GENERATORS.register("name")` on `fn(*, seed, num_tasks, **args)`.
"""

from __future__ import annotations

from producers.generators import arithmetic, countdown  # noqa: F401  (registers)
from producers.generators.registry import TASK_GENERATORS, GeneratedTaskset

__all__ = ["TASK_GENERATORS", "GeneratedTaskset"]
