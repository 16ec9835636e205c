"""`math_workflow`: a question with a numeric answer, scored by `math_reward` by default."""

from __future__ import annotations

from typing import ClassVar

from rft.workflows.workflow import Workflow

MATH_SYSTEM_PROMPT = (
    "You are a careful math assistant. Work the problem out step by step, "
    "then end with a final line of the form 'Answer: <number>'."
)


class MathWorkflow(Workflow):
    """Math questions; the answer lives in the `response_key` column."""

    default_reward_fn: ClassVar[str] = "math_reward"
    default_system_prompt: ClassVar[str | None] = MATH_SYSTEM_PROMPT
    needs_answer: ClassVar[bool] = True
