"""`countdown_workflow`: reach a target with given numbers; scored by `countdown_reward`.

Rows need the numbers (`workflow_args.numbers_key`, default "numbers") and the target
(`response_key`). A row without a prompt column gets a standard question built from those two.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from rft.events.models import Task
from rft.workflows.workflow import Workflow, format_object

COUNTDOWN_SYSTEM_PROMPT = (
    "You are a helpful assistant. Think through the problem, then give only the final equation "
    "inside <answer></answer> tags."
)
COUNTDOWN_QUESTION = (
    "Using the numbers {numbers}, create an equation that equals {target}. You can use +, -, * "
    "and /, and must use each number exactly once. Give the equation in <answer></answer> tags."
)


class CountdownWorkflow(Workflow):
    """Countdown puzzles (numbers + target)."""

    default_reward_fn: ClassVar[str] = "countdown_reward"
    default_system_prompt: ClassVar[str | None] = COUNTDOWN_SYSTEM_PROMPT
    needs_answer: ClassVar[bool] = True

    @classmethod
    def workflow_args_signature(cls) -> Callable[..., Any] | None:
        return countdown_workflow_args

    def check_payload(self, payload: Mapping[str, Any], fmt: Mapping[str, str]) -> str | None:
        problem = super().check_payload(payload, fmt)
        if problem:
            return problem
        key = _numbers_key(fmt)
        numbers = payload.get(key)
        if not (
            isinstance(numbers, list)
            and numbers
            and all(isinstance(n, int) and not isinstance(n, bool) for n in numbers)
        ):
            return f"{key!r} (the numbers) must be a non-empty list of integers"
        return None

    def _prompt_problem(self, payload: Mapping[str, Any], fmt: Mapping[str, str]) -> str | None:
        if fmt.get("prompt_key", "prompt") not in payload:
            return None  # the question is built from numbers and target
        return super()._prompt_problem(payload, fmt)

    def user_prompt(self, task: Task) -> str:
        key = task.format.get("prompt_key", "prompt")
        if key in task.payload:
            return str(task.payload[key])
        return COUNTDOWN_QUESTION.format(
            numbers=task.payload[_numbers_key(task.format)],
            target=task.payload[task.format.get("response_key", "response")],
        )

    def reward_args(self, task: Task) -> dict[str, Any]:
        args = super().reward_args(task)
        args.setdefault("numbers_key", _numbers_key(task.format))
        return args


def _numbers_key(fmt: Mapping[str, str]) -> str:
    return str(format_object(fmt, "workflow_args").get("numbers_key", "numbers"))


def countdown_workflow_args(*, numbers_key: str = "numbers") -> None:
    """countdown_workflow's workflow_args: the row column of the numbers."""
