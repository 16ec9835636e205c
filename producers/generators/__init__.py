"""Generators of verifiable tasksets; the built-in ones are declared in the registry by dotted
path and imported when first looked up.

Add one with `@TASK_GENERATORS.register("name")` on `fn(*, seed, num_tasks, **args)`.
"""

from __future__ import annotations

from rft.producers.generators.registry import TASK_GENERATORS, GeneratedTaskset

__all__ = ["TASK_GENERATORS", "GeneratedTaskset"]
