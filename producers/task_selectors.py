"""Task selectors: which rows of a training taskset become tasks, and in what order.

Trinity-RFT's `task_selector.selector_type` names, in two registries because they run in two
places:

- TASK_SELECTORS (offline: sequential, shuffle, random, offline_easy2hard) fix each epoch's order
  up front. They run in the publisher: tasks are events, so the order they enter the `tasks`
  topic is the order every explorer group reads them, and a restarted explorer resumes the same
  sequence from its committed offsets. Signature: `fn(num_rows, epoch, seed, features,
  **kwargs) -> row positions`, where `features[i]` holds row i's values of the selector's
  `feature_keys` (None when it names none).
- ONLINE_TASK_SELECTORS (difficulty_based) choose each batch from the rewards observed so far, so
  they cannot publish ahead: the task feeder (`rft.consumers.tasks.feeder`, `rft feed`) publishes their
  tasks batch by batch while it reads the experience topic. Signature: a class
  `cls(num_rows, seed, features, **kwargs)` with `select(count, round) -> positions` and
  `observe(position, reward)`; its state must depend only on the multiset of observations (not
  their order), which makes the feeder exactly resumable from the log.

A user adds one with one function or class and the registry's decorator. Eval tasksets are
always sequential.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from rft.errors import ConfigError
from rft.registry import Registry

Features = Sequence[tuple[float, ...]] | None
TaskSelector = Callable[..., list[int]]
TASK_SELECTORS: Registry[TaskSelector] = Registry(
    "buffer.explorer_input.taskset.task_selector.selector_type"
)


class OnlineTaskSelector(Protocol):
    """Chooses rows batch by batch from what was observed (see the module docstring)."""

    def select(self, count: int, round_index: int) -> list[int]: ...

    def observe(self, position: int, reward: float) -> None: ...


# classes: cls(num_rows, seed, features, **kwargs) -> OnlineTaskSelector
ONLINE_TASK_SELECTORS: Registry[Callable[..., OnlineTaskSelector]] = Registry(
    "buffer.explorer_input.taskset.task_selector.selector_type"
)


def selector_part(name: str) -> Any:
    """The offline function or online class registered as `name`; ConfigError listing both
    registries' names otherwise."""
    if name in TASK_SELECTORS:
        return TASK_SELECTORS.get(name)
    if name in ONLINE_TASK_SELECTORS:
        return ONLINE_TASK_SELECTORS.get(name)
    both: Registry[Any] = Registry(TASK_SELECTORS.kind)
    for n in TASK_SELECTORS:
        both.add(n, TASK_SELECTORS.get(n))
    for n in ONLINE_TASK_SELECTORS:
        both.add(n, ONLINE_TASK_SELECTORS.get(n))
    return both.get(name)


def is_online(name: str) -> bool:
    return name in ONLINE_TASK_SELECTORS


@TASK_SELECTORS.register("sequential")
def sequential(num_rows: int, epoch: int, seed: int, features: Features = None) -> list[int]:
    """Every row once per epoch, in file order (Trinity-RFT's default)."""
    return list(range(num_rows))


@TASK_SELECTORS.register("shuffle")
def shuffle(num_rows: int, epoch: int, seed: int, features: Features = None) -> list[int]:
    """Every row once per epoch, in a permutation seeded by `seed + epoch` (reproducible)."""
    order = list(range(num_rows))
    random.Random(seed + epoch).shuffle(order)
    return order


@TASK_SELECTORS.register("random")
def random_draws(num_rows: int, epoch: int, seed: int, features: Features = None) -> list[int]:
    """`num_rows` draws with replacement per epoch, seeded by `seed + epoch`: some rows repeat,
    some are not seen in that epoch."""
    rng = random.Random(seed + epoch)
    return [rng.randrange(num_rows) for _ in range(num_rows)]


@TASK_SELECTORS.register("offline_easy2hard")
def offline_easy2hard(
    num_rows: int,
    epoch: int,
    seed: int,
    features: Features = None,
    higher_is_easier: bool = True,
) -> list[int]:
    """A curriculum fixed before training: every row once per epoch, easiest first, by the
    columns named in `task_selector.feature_keys` (the first decides, the next break ties, then
    file order).

    Trinity-RFT's order is the default: higher values first (a column such as a pass rate,
    where higher is easier). For a difficulty column (higher is harder) set
    `kwargs: {higher_is_easier: false}`.
    """
    if not features:
        raise ConfigError(
            "task_selector.feature_keys: offline_easy2hard needs at least one column to sort by"
        )
    sign = -1.0 if higher_is_easier else 1.0
    return sorted(range(num_rows), key=lambda i: (*(sign * v for v in features[i]), i))


@ONLINE_TASK_SELECTORS.register("difficulty_based")
class DifficultyBased:
    """Online curriculum: explore the tasks whose predicted pass rate is nearest a target.

    Each row's pass rate p has a Beta(a, b) posterior: a = 1 + m p0 + S, b = 1 + m (1 - p0) + F,
    with S the sum of the observed rewards (each clipped to [0, 1]) of that row's rollouts and F
    the sum of (1 - reward); p0 is the row's first `feature_keys` value (a prior pass rate in
    [0, 1]) when one is named, with weight m = prior_strength, else 0.5 with weight 0. The
    prediction is the posterior mean a / (a + b), and
        score_i = -|target_reward - p_i|.
    With tau = 0 a batch is the `count` highest scores (ties: lower position); with tau > 0 it
    is `count` rows drawn without replacement with probability proportional to
    exp(score_i / tau) (Gumbel top-k, seeded by (seed, round)). Sums use math.fsum, so the
    state depends on which rewards were observed, never on their order.
    `lookahead_batches` is how many batches may be published and not yet answered: more keeps
    explorers busy, fewer makes each choice see more rewards (1: each batch is chosen from the
    rewards of every batch before it).
    """

    def __init__(
        self,
        num_rows: int,
        seed: int,
        features: Features = None,
        target_reward: float = 0.5,
        tau: float = 0.1,
        prior_strength: float = 2.0,
        lookahead_batches: int = 2,
    ) -> None:
        if not 0.0 <= target_reward <= 1.0:
            raise ConfigError(
                f"task_selector.kwargs.target_reward: must be in [0, 1], got {target_reward!r}"
            )
        if tau < 0 or prior_strength < 0:
            raise ConfigError("task_selector.kwargs: tau and prior_strength must be >= 0")
        if lookahead_batches < 1:
            raise ConfigError(
                f"task_selector.kwargs.lookahead_batches: must be >= 1, got {lookahead_batches}"
            )
        self.num_rows = num_rows
        self.seed = seed
        self.target_reward = target_reward
        self.tau = tau
        self.lookahead_batches = lookahead_batches
        prior = [0.5] * num_rows if not features else [min(max(f[0], 0.0), 1.0) for f in features]
        weight = prior_strength if features else 0.0
        self._a0 = [1.0 + weight * p for p in prior]
        self._b0 = [1.0 + weight * (1.0 - p) for p in prior]
        self._rewards: list[list[float]] = [[] for _ in range(num_rows)]

    def observe(self, position: int, reward: float) -> None:
        self._rewards[position].append(min(max(float(reward), 0.0), 1.0))

    def predicted_pass_rate(self) -> np.ndarray:
        out = np.empty(self.num_rows)
        for i, rewards in enumerate(self._rewards):
            successes = math.fsum(rewards)
            a = self._a0[i] + successes
            b = self._b0[i] + (len(rewards) - successes)
            out[i] = a / (a + b)
        return out

    def select(self, count: int, round_index: int) -> list[int]:
        count = min(count, self.num_rows)
        scores = -np.abs(self.target_reward - self.predicted_pass_rate())
        if self.tau == 0:
            keys = scores
        else:
            rng = np.random.default_rng([self.seed, round_index])
            keys = scores / self.tau + rng.gumbel(size=self.num_rows)
        # stable sort on -key: equal keys keep position order
        return [int(i) for i in np.argsort(-keys, kind="stable")[:count]]
