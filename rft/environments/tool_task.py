"""`ToolTask`: a tool environment written as its parts, and the `Environment` that plays one.

A tool task is a seeded problem the model solves with tools. A subclass says only what is its own:

- `tools`: the names (rft.tools.TOOLS) offered to the model;
- `problem(rng)`: the instance a seed picks, drawn from `rng` alone (seeds come from the train
  and eval splits of `rft.environments.seed_splits`, so the two never share an instance);
- `question(problem, with_tools)`: the user message (`with_tools` False: the no-tool baseline,
  the same problem answered without tools);
- `verdict(reply, problem)`: the reward of the model's answer, its first reply without a tool
  call, in [0, 1] (True/False will do); 1 means solved;
- `oracle(problem)`, where it has one: the turns that solve the problem, each a `call(...)` (or a
  list of calls, one turn) and lastly the answer text. rft renders and checks them through the
  tool workflow's own turns (rft.workflows.demonstrations).

Its constructor's keyword parameters are its settings, given as the taskset's `workflow_args`.
`ToolTaskEnvironment` plays an instance as an environment of one step (the answer);
`rft.workflows.tool_tasks.register_tool_task` makes it a pair of workflows, with and without
tools, and `rft.producers.generators.tool_tasks.tool_task` also its taskset generator.
"""

from __future__ import annotations

import abc
import inspect
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from rft.environments.protocol import Episode, StepResult
from rft.environments.seed_splits import instance_random

P = TypeVar("P")


@dataclass(frozen=True)
class Call:
    """One tool call of an oracle's turn: the tool's name and its arguments."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


def call(name: str, /, **arguments: Any) -> Call:
    """An oracle's call of tool `name` with `arguments`."""
    return Call(name, arguments)


# one turn of an oracle: a call, several calls in one reply, or the answer text (the last turn)
Turn = Call | Sequence[Call] | str


class ToolTask(abc.ABC, Generic[P]):
    """A tool task's own parts (see the module docstring); subclass it and register it."""

    tools: ClassVar[tuple[str, ...]] = ()
    # model turns a rollout with tools may take, tool calls included (workflow_args.max_turns)
    max_turns: ClassVar[int] = 4

    @abc.abstractmethod
    def problem(self, rng: random.Random) -> P:
        """The instance of one seed, drawn from `rng`."""

    @abc.abstractmethod
    def question(self, problem: P, with_tools: bool) -> str:
        """The user message that poses `problem` (with or without the tools offered)."""

    @abc.abstractmethod
    def verdict(self, reply: str, problem: P) -> float:
        """The reward of the answer `reply`, in [0, 1]; 1 is solved."""

    def oracle(self, problem: P) -> Sequence[Turn] | None:
        """The turns that solve `problem`, or None: this task has no oracle."""
        return None


SOLVED = 1.0


class ToolTaskEnvironment:
    """An `Environment` playing `task`: `reset` poses the seed's problem, `step` judges the answer
    (the first reply without a tool call) with the verdict and ends the episode."""

    def __init__(
        self,
        name: str,
        task: ToolTask[Any],
        settings: Mapping[str, Any],
        with_tools: bool,
        max_turns: int | None = None,
    ) -> None:
        self.name, self.task, self.with_tools = name, task, with_tools
        self.tools: tuple[str, ...] = tuple(task.tools) if with_tools else ()
        # the baseline has no tool to call: its first reply is its answer
        self.max_turns = max_turns or (task.max_turns if with_tools else 1)
        # an instance is (name, settings, seed): other settings pose other problems
        self.settings = json.dumps(dict(settings), sort_keys=True, default=str)
        self.episode = Episode(name, 1)
        self.problem: Any = None

    def reset(self, seed: int) -> str:
        self.problem = self.task.problem(instance_random(self.name, self.settings, seed))
        self.episode.begin()
        return self.task.question(self.problem, self.with_tools)

    def step(self, action: str) -> StepResult:
        self.episode.count_step()
        self.episode.finish(True)
        reward = float(self.task.verdict(action, self.problem))
        solved = reward >= SOLVED
        text = "Solved." if solved else "Not solved."
        return StepResult(text, reward, True, {"outcome": "solved" if solved else "unsolved"})


def environment_factory(name: str, cls: type[ToolTask[Any]]) -> Callable[..., ToolTaskEnvironment]:
    """The ENVIRONMENTS entry of tool task `cls`: `(**settings, with_tools, max_turns)`; its
    signature is the task's settings plus those two, which workflow_args are checked against."""

    def make(
        *, with_tools: bool = True, max_turns: int | None = None, **settings: Any
    ) -> ToolTaskEnvironment:
        return ToolTaskEnvironment(name, cls(**settings), settings, with_tools, max_turns)

    own = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for p in inspect.signature(cls).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    added = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a)
        for n, d, a in (("with_tools", True, "bool"), ("max_turns", None, "int | None"))
    ]
    make.__signature__ = inspect.Signature(own + added)  # type: ignore[attr-defined]
    make.__name__ = make.__qualname__ = name
    make.__doc__ = cls.__doc__
    return make
