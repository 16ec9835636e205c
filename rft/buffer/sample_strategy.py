"""Sample strategies (`algorithm.sample_strategy`): how the trainer forms batches from experiences.

A strategy is a factory `(train_batch_size, **sample_strategy_args) -> batcher` registered in
`SAMPLE_STRATEGIES`; the batcher takes experiences in (`add`) and hands out whole batches
(`take_batch`). `default` is the GroupBatcher: complete rollout groups in arrival (offset) order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rft.buffer.group_batcher import GroupBatcher
from rft.registry import Registry

SampleStrategy = Callable[..., GroupBatcher[Any]]
SAMPLE_STRATEGIES: Registry[SampleStrategy] = Registry("algorithm.sample_strategy")


@SAMPLE_STRATEGIES.register("default")
def default_strategy(train_batch_size: int) -> GroupBatcher[Any]:
    """FIFO by arrival: whole rollout groups, oldest complete group first."""
    return GroupBatcher(train_batch_size)
