"""Task selectors: the order in which a training taskset's rows are published, epoch by epoch.

Selection happens in the publisher: tasks are events, so the order they enter the `tasks` topic is
the order every explorer group reads them, and a restarted explorer resumes the same sequence from
its committed offsets. A selector is a pure function `(num_rows, epoch, seed, **kwargs) -> row
positions`, registered under Trinity-RFT's `task_selector.selector_type` names; a user adds one
with one function and `@TASK_SELECTORS.register("name")`. Eval tasksets are always sequential.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from rft.registry import Registry

TaskSelector = Callable[..., list[int]]
TASK_SELECTORS: Registry[TaskSelector] = Registry(
    "buffer.explorer_input.taskset.task_selector.selector_type"
)


@TASK_SELECTORS.register("sequential")
def sequential(num_rows: int, epoch: int, seed: int) -> list[int]:
    """Every row once per epoch, in file order (Trinity-RFT's default)."""
    return list(range(num_rows))


@TASK_SELECTORS.register("shuffle")
def shuffle(num_rows: int, epoch: int, seed: int) -> list[int]:
    """Every row once per epoch, in a permutation seeded by `seed + epoch` (reproducible)."""
    order = list(range(num_rows))
    random.Random(seed + epoch).shuffle(order)
    return order


@TASK_SELECTORS.register("random")
def random_draws(num_rows: int, epoch: int, seed: int) -> list[int]:
    """`num_rows` draws with replacement per epoch, seeded by `seed + epoch`: some rows repeat,
    some are not seen in that epoch."""
    rng = random.Random(seed + epoch)
    return [rng.randrange(num_rows) for _ in range(num_rows)]
