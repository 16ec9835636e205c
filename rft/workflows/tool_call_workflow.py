"""`tool_call_workflow`: a taskset row's question answered with tools, as Trinity's rows are.

The first messages are the row's (prompt or chat, system prompt), offering the row's tools
(`format.tools_key`) or the taskset's (`workflow_args.tools`). The model calls tools as it likes;
its first reply without a call is its answer, scored by the task's reward function (default
`math_reward`) against the row's answer. `max_turns` (default 4) counts the model's turns, tool
calls included; a rollout that runs out of turns before answering scores 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from rft.events.models import Task
from rft.workflows.model_handle import Message
from rft.workflows.multi_turn import (
    LIMIT_PARAMS,
    Episode,
    MultiTurnWorkflow,
    StepAnswer,
    args_signature,
    positive,
)
from rft.workflows.offered_tools import TOOL_PARAMS, offer_tools, tools_column_problem
from rft.workflows.workflow import Workflow, format_object

DEFAULT_MAX_TURNS = 4


class ToolCallWorkflow(MultiTurnWorkflow):
    """A question, tools to answer it with, and the reward fn on the final reply."""

    needs_answer: ClassVar[bool] = True

    @classmethod
    def workflow_args_signature(cls) -> Callable[..., Any] | None:
        return args_signature(cls.__name__, LIMIT_PARAMS, TOOL_PARAMS)

    def check_payload(self, payload: Mapping[str, Any], fmt: Mapping[str, str]) -> str | None:
        return super().check_payload(payload, fmt) or tools_column_problem(payload, fmt)

    def episode(self, task: Task, index: int) -> Episode:
        args = format_object(task.format, "workflow_args")
        max_turns = int(args.get("max_turns") or DEFAULT_MAX_TURNS)
        positive("max_turns", max_turns)

        def step(reply: str) -> StepAnswer:
            reward, info = self.score(task, reply)
            return StepAnswer([], reward, True, dict(info))

        episode = Episode(list[Message](Workflow.messages(self, task)), step, max_turns)
        return offer_tools(episode, task, args, ())
