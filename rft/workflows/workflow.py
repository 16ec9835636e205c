"""The `Workflow` base class: build a task's messages from its payload and format keys, and turn
the model's replies into scored `Trajectory` objects with the task's reward function.

Format keys follow Trinity-RFT: `prompt_key`, `response_key` (the answer), `system_prompt`,
`system_prompt_key`, `reply_prefix`, and `prompt_type: messages` with `messages_key` for rows that
already hold a chat. `reward_fn_args` / `workflow_args` ride in the format map as JSON object text.

A workflow reaches the explorer's auxiliary models (`explorer.auxiliary_models`: a judge, a user
simulator) by name through `self.auxiliary_models`, and `score` hands a reward function that asks
one (its entry's `asks_model` trait) the model it names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from rft.engines.auxiliary_models import AuxiliaryModels
from rft.errors import TasksetError
from rft.events.models import Task
from rft.rewards import AUXILIARY_MODEL_ARG, REWARD_FUNCTIONS, RewardInfo, asked_model
from rft.workflows.trajectory import Trajectory

if TYPE_CHECKING:
    from rft.engines.rollout import Rollout

Message = dict[str, str]


class Workflow:
    """Default behaviour: system prompt (format or class default) + the user prompt column."""

    default_reward_fn: ClassVar[str] = "math_reward"
    default_system_prompt: ClassVar[str | None] = None
    needs_answer: ClassVar[bool] = False
    # True: the workflow loops over the model itself, `run(task, model, params, index)` returning
    # trajectories (rft.workflows.multi_turn_runner); False: the runner generates its one reply
    drives_model: ClassVar[bool] = False
    # the explorer's auxiliary models by name (none unless the explorer gives its roster)
    auxiliary_models: AuxiliaryModels = AuxiliaryModels()

    @classmethod
    def workflow_args_signature(cls) -> Callable[..., Any] | None:
        """A callable whose keyword parameters are the `workflow_args` this workflow reads, which
        a config's are checked against at load; None: the workflow declares none (unchecked)."""
        return None

    def check_payload(self, payload: Mapping[str, Any], fmt: Mapping[str, str]) -> str | None:
        """Why `payload` cannot become a task under `fmt`, or None when it can."""
        if fmt.get("prompt_type") == "messages":
            key = fmt.get("messages_key", "messages")
            if not _is_chat(payload.get(key)):
                return f"{key!r} must be a list of {{role, content}} string objects"
        else:
            problem = self._prompt_problem(payload, fmt)
            if problem:
                return problem
        system_key = fmt.get("system_prompt_key")
        if system_key and not isinstance(payload.get(system_key), str):
            return f"system_prompt_key {system_key!r} missing or not a string"
        answer_key = fmt.get("response_key", "response")
        if self.needs_answer and payload.get(answer_key) is None:
            return f"response_key {answer_key!r} (the answer) missing"
        return None

    def _prompt_problem(self, payload: Mapping[str, Any], fmt: Mapping[str, str]) -> str | None:
        key = fmt.get("prompt_key", "prompt")
        value = payload.get(key)
        if not isinstance(value, str) or not value.strip():
            return f"prompt_key {key!r} missing or not a non-empty string"
        return None

    def messages(self, task: Task) -> list[Message]:
        """The chat sent to the model: optional system message, then the user prompt."""
        self._require_valid(task)
        fmt = task.format
        if fmt.get("prompt_type") == "messages":
            chat = [dict(m) for m in task.payload[fmt.get("messages_key", "messages")]]
            if chat and chat[0]["role"] == "system":
                return chat
            system = self.system_prompt(task)
            return ([{"role": "system", "content": system}] if system else []) + chat
        system = self.system_prompt(task)
        head = [{"role": "system", "content": system}] if system else []
        return head + [{"role": "user", "content": self.user_prompt(task)}]

    def system_prompt(self, task: Task) -> str | None:
        key = task.format.get("system_prompt_key")
        if key:
            return str(task.payload[key])
        return task.format.get("system_prompt") or self.default_system_prompt

    def user_prompt(self, task: Task) -> str:
        return str(task.payload[task.format.get("prompt_key", "prompt")])

    def reply_prefix(self, task: Task) -> str:
        """Text the reply is forced to start with (format `reply_prefix`); scored with the reply."""
        return task.format.get("reply_prefix") or ""

    def reward_fn_name(self, task: Task) -> str:
        return task.reward_fn or self.default_reward_fn

    def reward_args(self, task: Task) -> dict[str, Any]:
        """`answer_key` from the format, then the taskset's `reward_fn_args`."""
        args: dict[str, Any] = {"answer_key": task.format.get("response_key", "response")}
        args.update(format_object(task.format, "reward_fn_args"))
        return args

    def score(self, task: Task, response_text: str) -> tuple[float, RewardInfo]:
        """Reward of one full reply (reply_prefix included) from the task's reward function,
        given the auxiliary model it asks, if it asks one."""
        name = self.reward_fn_name(task)
        reward_fn = REWARD_FUNCTIONS.get(name)
        args = self.reward_args(task)
        model = asked_model(name, args)
        if model is not None:
            args[AUXILIARY_MODEL_ARG] = self.auxiliary_models.get(model)
        reward, info = reward_fn(response_text, task.payload, **args)
        return float(reward), info

    def reward_metrics(self, task: Task, info: Mapping[str, Any]) -> dict[str, float]:
        """The numbers of `info` that the task's reward declares per-rollout metrics
        (its entry's `info_metrics`)."""
        keys = REWARD_FUNCTIONS.spec(self.reward_fn_name(task)).info_metrics
        return {k: float(info[k]) for k in keys if isinstance(info.get(k), int | float)}

    def trajectories(self, task: Task, prefix: str, replies: Sequence[Rollout]) -> list[Trajectory]:
        """The task's trajectories from its `repeat_times` replies to `messages(task)` (all of a
        step's replies come from batched engine calls). Single-turn: one trajectory per reply,
        scored with `prefix` (the reply prefix, which the prompt ends with) put back in front."""
        trajectories = []
        for reply in replies:
            reward, info = self.score(task, prefix + reply.text)
            trajectory = Trajectory.of_reply(reply, reward, info)
            trajectories.append(trajectory.scored(reward, info, self.reward_metrics(task, info)))
        return trajectories

    def _require_valid(self, task: Task) -> None:
        problem = self.check_payload(task.payload, task.format)
        if problem:
            raise TasksetError(f"task {task.task_id}: {problem}")


def format_object(fmt: Mapping[str, str], key: str) -> dict[str, Any]:
    """A JSON-object entry of a format map (e.g. reward_fn_args); {} when absent."""
    text = fmt.get(key)
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise TasksetError(f"format[{key!r}] is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise TasksetError(f"format[{key!r}] must be a JSON object, got {text[:60]!r}")
    return value


def _is_chat(value: object) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in value
        )
    )
