"""The reward function registry, `REWARD_FUNCTIONS`, and the one signature its entries share.

A reward function scores one response: `fn(response_text, task_payload, **args) -> (reward, info)`
where `task_payload` is the task's raw row and `info` maps names to floats or short strings. Users
add one with `@REWARD_FUNCTIONS.register("name")`.

Two traits of an entry say what it needs beyond that:
- `asks_model`: the reward asks an auxiliary model (`explorer.auxiliary_models`). The trait is the
  name of its argument that names the model (`asked_model` reads it from the args, else from the
  function's default); its caller passes that model as the keyword `auxiliary_model`, and a
  config whose reward names no configured model is refused at load.
- `info_metrics`: keys of its `info` that are numbers per rollout (a fallback taken, a parse that
  failed); the workflow copies them into the trajectory's metrics, so each step reports their
  mean (`<key>_mean`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rft.config.binding import Issue
from rft.errors import ConfigError, TasksetError
from rft.registry import PartSpec, Registry, Requirement

RewardInfo = dict[str, float | str]


# fn(response_text, task_payload, **args) -> (reward, info); args are each function's keywords
RewardFn = Callable[..., tuple[float, RewardInfo]]


class RewardInputError(TasksetError):
    """A task row lacks what its reward function needs (e.g. the answer key)."""


@dataclass(frozen=True)
class RewardSpec(PartSpec):
    """What a reward function's entry declares.

    - `asks_model`: the argument (of reward_fn_args) naming the auxiliary model it asks; its
      workflow passes that model as the keyword `auxiliary_model`, and a config naming an
      unconfigured one is refused at load;
    - `info_metrics`: the numbers of its `info` reported as per-step metrics (`<key>_mean`).
    """

    asks_model: str | None = None
    info_metrics: tuple[str, ...] = ()


# a reward's own check and this rule are given (reward_fn_args, the taskset's key path, the config)
REWARD_FUNCTIONS: Registry[RewardFn, RewardSpec] = Registry(
    "reward_fn", RewardSpec, rule="rft.rewards.registry:asked_model_issues"
)
# the built-in rewards, imported when first looked up
REWARD_FUNCTIONS.lazy("math_reward", "rft.rewards.math_reward:math_reward")
REWARD_FUNCTIONS.lazy("accuracy_reward", "rft.rewards.math_reward:accuracy_reward")
REWARD_FUNCTIONS.lazy("countdown_reward", "rft.rewards.countdown_reward:countdown_reward")
REWARD_FUNCTIONS.lazy("format_reward", "rft.rewards.format_reward:format_reward")
# the keyword a reward that asks an auxiliary model is given it under
AUXILIARY_MODEL_ARG = "auxiliary_model"
REWARD_FUNCTIONS.lazy(
    "llm_judge",
    "rft.rewards.llm_judge:llm_judge",
    check="rft.rewards.llm_judge:judge_args_issues",
    asks_model="judge_model",
    info_metrics=("judge_fallback", "judge_parse_failure", "judge_call_failure"),
)
# equivalence by math-verify (an optional package: `make setup` installs it with the math extra)
MATH_VERIFY = Requirement("math_verify", "pip install 'rft[math]' (or: pip install math-verify)")
REWARD_FUNCTIONS.lazy(
    "math_boxed_reward", "rft.rewards.math_verified:math_boxed_reward", requires=[MATH_VERIFY]
)
REWARD_FUNCTIONS.lazy(
    "math_dapo_reward",
    "rft.rewards.math_verified:math_dapo_reward",
    requires=[MATH_VERIFY],
    check="rft.rewards.math_verified:dapo_args_issues",
)


def payload_field(task_payload: dict[str, Any], key: str, reward_name: str) -> Any:
    """Return `task_payload[key]`, or raise RewardInputError naming the key and the reward."""
    if key not in task_payload:
        raise RewardInputError(
            f"{reward_name}: task payload has no key {key!r} "
            f"(keys: {', '.join(sorted(task_payload)) or 'none'}); "
            "set format.response_key to the column holding the answer"
        )
    return task_payload[key]


def asked_model(name: str, args: Mapping[str, Any]) -> str | None:
    """The auxiliary model that reward `name` asks under `args` (None: it asks none): the arg its
    entry's `asks_model` trait names, else that parameter's default."""
    arg = REWARD_FUNCTIONS.spec(name).asks_model
    if arg is None:
        return None
    if arg in args:
        return str(args[arg])
    default = inspect.signature(REWARD_FUNCTIONS.get(name)).parameters[arg].default
    return None if default is inspect.Parameter.empty else str(default)


def asked_model_issues(
    name: str, spec: RewardSpec, args: Mapping[str, Any], path: str, cfg: Any
) -> list[Issue]:
    """REWARD_FUNCTIONS' rule: the auxiliary model a reward asks is one the config has."""
    try:
        model = asked_model(name, args)
    except ConfigError:  # its package is missing: said where the entry is looked up
        return []
    names = [aux.name for aux in cfg.explorer.auxiliary_models]
    if model is None or model in names:
        return []
    return [
        Issue(
            f"{path}.reward_fn_args.{spec.asks_model}",
            f"{name} asks the auxiliary model {model!r}, which explorer.auxiliary_models "
            f"does not name (names: {', '.join(repr(n) for n in names) or 'none'})",
        )
    ]
