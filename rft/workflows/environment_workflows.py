"""Workflows that play an environment (`rft.environments.ENVIRONMENTS`) with the model, turn by turn.

A task's payload holds its `seed` (the environment instance; every rollout of the task plays the
same one, so a group compares like with like); the taskset generators of the same names
(`rft.producers.generators.environment_tasks`) make train and held-out eval tasks from the seed
splits. The reward is the sum of the environment's step rewards (the task's reward fn is not used).
`register_environment(name, factory)` adds an environment and the workflow that plays it at once
(`rft.producers.generators.environment_tasks.environment` also adds its taskset generator).

`workflow_args` (checked against `workflow_args_signature` when the config loads): the
environment's own settings (e.g. frozen_lake's `size`), `max_turns` (the environment's budget and
the rollout's; default the environment's), `max_total_tokens`, `env_step_timeout_s` (default 30),
and for a workflow that offers tools, `tools` (names in `rft.tools.TOOLS`; default the
environment's) and `tool_timeout_s`. Format keys: `system_prompt`, `chat_template`,
`tool_call_parser` (default hermes) and `tools_key` (a row column listing the tools, by name or as
OpenAI specs naming registered tools, offered instead of `tools`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from rft.environments import ENVIRONMENTS, Environment, split_of
from rft.errors import ConfigError
from rft.events.models import Task
from rft.workflows.multi_turn import (
    LIMIT_PARAMS,
    Episode,
    MultiTurnWorkflow,
    StepAnswer,
    args_signature,
    positive,
)
from rft.workflows.offered_tools import TOOL_PARAMS, offer_tools, tools_column_problem
from rft.workflows.registry import WORKFLOWS
from rft.workflows.workflow import Message, format_object

SEED_KEY = "seed"


class EnvironmentWorkflow(MultiTurnWorkflow):
    """Plays `environment`; offers tools (parsed with the format's `tool_call_parser`) when
    `offers_tools`."""

    environment: ClassVar[str]
    offers_tools: ClassVar[bool] = False
    # settings always passed to the environment (e.g. the calculator switched off)
    fixed_settings: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def workflow_args_signature(cls) -> Callable[..., Any]:
        """A callable whose keyword parameters are the `workflow_args` this workflow reads."""
        own = inspect.signature(ENVIRONMENTS.get(cls.environment)).parameters.values()
        params = [p for p in own if p.name not in cls.fixed_settings]
        return args_signature(
            cls.__name__, params, LIMIT_PARAMS + (TOOL_PARAMS if cls.offers_tools else [])
        )

    def check_payload(self, payload: Mapping[str, Any], fmt: Mapping[str, str]) -> str | None:
        seed = payload.get(SEED_KEY)
        try:
            split_of(seed)  # type: ignore[arg-type]
        except ValueError as exc:
            return f"{SEED_KEY!r}: {exc}"
        return tools_column_problem(payload, fmt) if self.offers_tools else None

    def _args(self, task: Task) -> dict[str, Any]:
        return format_object(task.format, "workflow_args")

    def _environment(self, args: Mapping[str, Any]) -> Environment:
        limit_names = {p.name for p in LIMIT_PARAMS + TOOL_PARAMS} - {"max_turns"}
        settings = {k: v for k, v in args.items() if k not in limit_names}
        settings.update(self.fixed_settings)
        if settings.get("max_turns") is None:
            settings.pop("max_turns", None)
        factory = ENVIRONMENTS.get(self.environment)
        try:
            return factory(**settings)
        except TypeError as exc:
            raise ConfigError(f"workflow_args for {self.environment}: {exc}") from exc

    def episode(self, task: Task, index: int) -> Episode:
        args = self._args(task)
        env = self._environment(args)
        max_turns = int(args.get("max_turns") or env.max_turns)
        positive("max_turns", max_turns)
        observation = env.reset(int(task.payload[SEED_KEY]))
        system = self.system_prompt(task)
        messages: list[Message] = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": observation})

        def step(reply: str) -> StepAnswer:
            result = env.step(reply)
            said = [] if result.done else [{"role": "user", "content": result.observation}]
            return StepAnswer(said, result.reward, result.done, dict(result.info))

        episode = Episode(list(messages), step, max_turns)
        if self.offers_tools:
            offer_tools(episode, task, args, env.tools)
        return episode


def register_environment(name: str, factory: Callable[..., Environment]) -> None:
    """Register `factory` (an environment class, its keyword arguments its settings) as
    environment `name` and the workflow `name` that plays it."""
    ENVIRONMENTS.add(name, factory)
    title = getattr(factory, "__name__", name)
    module = getattr(factory, "__module__", __name__)
    played = type(f"{title}Workflow", (EnvironmentWorkflow,), {"environment": name})
    played.__module__ = module
    WORKFLOWS.add(name, played)


class FrozenLakeWorkflow(EnvironmentWorkflow):
    environment = "frozen_lake"


class GuessNumberWorkflow(EnvironmentWorkflow):
    environment = "guess_number"


class MultiplicationToolWorkflow(EnvironmentWorkflow):
    """Multiplication with the calculator offered through tool calls."""

    environment = "multiplication"
    offers_tools = True
    fixed_settings: ClassVar[Mapping[str, Any]] = {"with_calculator": True}


class MultiplicationWorkflow(EnvironmentWorkflow):
    """The same problems without tools: the model's own arithmetic, for comparison."""

    environment = "multiplication"
    fixed_settings: ClassVar[Mapping[str, Any]] = {"with_calculator": False}
