"""`simple_workflow`: the prompt as given (no default system prompt), scored by the task's reward.

Its default reward is `accuracy_reward`, which accepts numeric and text answers.
"""

from __future__ import annotations

from typing import ClassVar

from rft.workflows.workflow import Workflow


class SimpleWorkflow(Workflow):
    """One user turn from `prompt_key` (plus the format's system prompt, if any)."""

    default_reward_fn: ClassVar[str] = "accuracy_reward"
