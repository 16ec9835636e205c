"""Generators of environment tasksets: one task per seed of an environment's train or held-out
eval split (`rft.environments.split_seeds`), played by the workflow of the same name.

`fn(seed=0, num_tasks=100, split="train")`: the `num_tasks` seeds of `split` from its `seed`-th on,
so a train taskset and an eval taskset never share an instance. Rows: `seed`, `split`. The
environment's settings (size, range, digits, turns) are the taskset's `workflow_args`.
"""

from __future__ import annotations

from rft.environments import split_seeds
from rft.errors import ConfigError
from rft.producers.generators.registry import GeneratedTaskset


def _seed_tasks(workflow: str, seed: int, num_tasks: int, split: str) -> GeneratedTaskset:
    try:
        seeds = split_seeds(split, num_tasks, start=seed)
    except ValueError as exc:
        raise ConfigError(f"generator {workflow!r}: {exc}") from exc
    rows = [{"seed": s, "split": split} for s in seeds]
    return GeneratedTaskset(rows, default_workflow=workflow)


def frozen_lake(*, seed: int = 0, num_tasks: int = 100, split: str = "train") -> GeneratedTaskset:
    """frozen_lake instances, one per seed of `split`."""
    return _seed_tasks("frozen_lake", seed, num_tasks, split)


def guess_number(*, seed: int = 0, num_tasks: int = 100, split: str = "train") -> GeneratedTaskset:
    """guess_number instances, one per seed of `split`."""
    return _seed_tasks("guess_number", seed, num_tasks, split)


def multiplication(
    *, seed: int = 0, num_tasks: int = 100, split: str = "train"
) -> GeneratedTaskset:
    """multiplication problems, one per seed of `split`, played with the calculator
    (`default_workflow_type: multiplication` plays them without it)."""
    return _seed_tasks("multiplication_tool", seed, num_tasks, split)
