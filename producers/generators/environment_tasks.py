"""Generators of environment tasksets: one task per seed of an environment's train or held-out
eval split (`rft.environments.split_seeds`), played by the workflow of the same name.

`fn(seed=0, num_tasks=100, split="train")`: the `num_tasks` seeds of `split` from its `seed`-th on,
so a train taskset and an eval taskset never share an instance. Rows: `seed`, `split`. The
environment's settings (size, range, digits, turns) are the taskset's `workflow_args`.

`@environment("name")` on an environment class is the one registration of a new environment: the
environment, the workflow that plays it (`rft.workflows.environment_workflows`) and the generator
of its seeds, all named `name`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from rft.environments import split_seeds
from rft.errors import ConfigError
from rft.producers.generators.registry import TASK_GENERATORS, GeneratedTaskset
from rft.workflows.environment_workflows import register_environment

F = TypeVar("F", bound=Callable[..., Any])


def seed_tasks(workflow: str, seed: int, num_tasks: int, split: str) -> GeneratedTaskset:
    """One task per seed of `split` (the `num_tasks` from its `seed`-th on), for `workflow`."""
    try:
        seeds = split_seeds(split, num_tasks, start=seed)
    except ValueError as exc:
        raise ConfigError(f"generator {workflow!r}: {exc}") from exc
    rows = [{"seed": s, "split": split} for s in seeds]
    return GeneratedTaskset(rows, default_workflow=workflow)


def frozen_lake(*, seed: int = 0, num_tasks: int = 100, split: str = "train") -> GeneratedTaskset:
    """frozen_lake instances, one per seed of `split`."""
    return seed_tasks("frozen_lake", seed, num_tasks, split)


def guess_number(*, seed: int = 0, num_tasks: int = 100, split: str = "train") -> GeneratedTaskset:
    """guess_number instances, one per seed of `split`."""
    return seed_tasks("guess_number", seed, num_tasks, split)


def multiplication(
    *, seed: int = 0, num_tasks: int = 100, split: str = "train"
) -> GeneratedTaskset:
    """multiplication problems, one per seed of `split`, played with the calculator
    (`default_workflow_type: multiplication` plays them without it)."""
    return seed_tasks("multiplication_tool", seed, num_tasks, split)


def seed_generator(name: str, workflow: str | None = None) -> Callable[..., GeneratedTaskset]:
    """The generator `fn(seed=0, num_tasks=100, split="train")` of environment `name`'s seeds,
    played by `workflow` (default: the one named `name`)."""

    def generate(*, seed: int = 0, num_tasks: int = 100, split: str = "train") -> GeneratedTaskset:
        return seed_tasks(workflow or name, seed, num_tasks, split)

    generate.__name__ = generate.__qualname__ = name
    generate.__doc__ = f"{name} instances, one per seed of `split`."
    return generate


def environment(name: str) -> Callable[[F], F]:
    """Class decorator: register an environment class as the environment, workflow and taskset
    generator `name`; it returns the class as is."""

    def decorate(cls: F) -> F:
        register_environment(name, cls)
        TASK_GENERATORS.add(name, seed_generator(name))
        return cls

    return decorate
