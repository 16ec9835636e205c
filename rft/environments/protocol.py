"""The environment protocol and the `ENVIRONMENTS` registry.

An environment is a seeded, offline game a multi-turn workflow plays with the model:
`reset(seed) -> observation` starts the instance the seed picks (the same seed always gives the same
instance), `step(action) -> StepResult(observation, reward, done, info)` answers one model reply.
`max_turns` is a hint to the workflow: the model turns a trajectory may take (tool calls included);
`tools` names the tools (rft.tools.TOOLS) the environment expects to be offered. Register an
environment class with `@ENVIRONMENTS.register("name")`; its keyword arguments are its settings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

from rft.errors import ConfigError, RftError
from rft.registry import Registry

StepInfo = dict[str, float | str]


class StepResult(NamedTuple):
    """One step's answer; unpacks as `(observation, reward, done, info)`."""

    observation: str
    reward: float
    done: bool
    info: StepInfo


class Environment(Protocol):
    max_turns: int
    tools: tuple[str, ...]

    def reset(self, seed: int) -> str: ...

    def step(self, action: str) -> StepResult: ...


class EnvironmentStateError(RftError):
    """`step` was called before `reset`, or after the episode ended."""


ENVIRONMENTS: Registry[Callable[..., Environment]] = Registry("environment")


class Episode:
    """The bookkeeping every environment shares: started, finished, steps taken of a budget."""

    def __init__(self, name: str, max_steps: int) -> None:
        if max_steps < 1:
            raise ConfigError(f"{name}: max_turns must be at least 1, got {max_steps}")
        self.name = name
        self.max_steps = max_steps
        self.steps = 0
        self.started = False
        self.done = False

    def begin(self) -> None:
        self.steps = 0
        self.started = True
        self.done = False

    def count_step(self) -> None:
        """Count one step; EnvironmentStateError when the episode is not running."""
        if not self.started:
            raise EnvironmentStateError(f"{self.name}: step() before reset()")
        if self.done:
            raise EnvironmentStateError(f"{self.name}: step() after the episode ended")
        self.steps += 1

    @property
    def out_of_steps(self) -> bool:
        return self.steps >= self.max_steps

    def finish(self, done: bool) -> bool:
        self.done = done
        return done
