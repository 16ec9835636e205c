"""`llm_judge`: a reward read from an auxiliary judge model's verdict on a rubric.

The judge (the auxiliary model named by `judge_model`, `explorer.auxiliary_models`) is asked one
chat: the rubric, the task's question (`question_key` of its row) and, when the row has one, its
reference answer (`answer_key`), then the response, and an instruction to reply `Score: <n>`
with n from `min_score` to `max_score`. The reward is that score scaled to [0, 1].

A judge is a model, so its answer may be anything. `parse_score` takes the number after "score"
(`Score: 7`, `score is 7/10`), else the reply's only number; a reply with no such number, with
several bare numbers, or with a score outside the range is a parse failure. A parse failure, a
call that fails, or no answer within `timeout_s` gives `fallback_reward` instead, never an error:
a bad verdict costs one rollout its reward, not the step. `info` says which happened
(`judge_fallback`, `judge_parse_failure`, `judge_call_failure`, each 0 or 1: the entry's
`info_metrics`, so each step reports their means) with the judge's reply or the error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from rft.config.binding import Issue
from rft.errors import EngineError
from rft.rewards.registry import RewardInfo, RewardInputError

DEFAULT_RUBRIC = (
    "Grade the response to the question: is it correct, complete and clearly stated? "
    "A wrong final answer scores low whatever its style."
)
_SCORE = re.compile(r"\bscore\b(?:\s*(?:is|of|=|:))*\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")
REPLY_KEPT = 200  # characters of the judge's reply kept in info


class JudgeModel(Protocol):
    """What the judge reward needs of an auxiliary model (`rft.engines.auxiliary_models`)."""

    @property
    def name(self) -> str: ...

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        max_tokens: int,
        temperature: float,
        timeout_s: float | None,
    ) -> str: ...


def parse_score(reply: str, min_score: float, max_score: float) -> float | None:
    """The score in a judge's reply (see the module docstring); None when there is none."""
    found = _SCORE.search(reply)
    if found is not None:
        value = float(found.group(1))
    else:
        numbers = _NUMBER.findall(reply)
        if len(numbers) != 1:
            return None
        value = float(numbers[0])
    return value if min_score <= value <= max_score else None


def judge_messages(
    rubric: str,
    question: str | None,
    response: str,
    answer: str | None,
    min_score: float,
    max_score: float,
) -> list[dict[str, str]]:
    """The chat the judge is asked."""
    parts = [f"Rubric: {rubric}"]
    if question is not None:
        parts.append(f"Question:\n{question}")
    if answer is not None:
        parts.append(f"Reference answer:\n{answer}")
    parts.append(f"Response:\n{response}")
    parts.append(
        f"Reply with one line, `Score: <n>`, n a number from {_num(min_score)} "
        f"to {_num(max_score)}."
    )
    return [
        {"role": "system", "content": "You are a strict grader."},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def llm_judge(
    response_text: str,
    task_payload: dict[str, Any],
    *,
    auxiliary_model: JudgeModel,
    judge_model: str = "judge",
    rubric: str = DEFAULT_RUBRIC,
    question_key: str | None = "question",
    answer_key: str | None = None,
    min_score: float = 0.0,
    max_score: float = 10.0,
    fallback_reward: float = 0.0,
    timeout_s: float = 30.0,
    max_tokens: int = 32,
    temperature: float = 0.0,
) -> tuple[float, RewardInfo]:
    """The judge's score of `response_text`, scaled to [0, 1], or `fallback_reward` (see the
    module docstring). `question_key: null` leaves the question out; a row without its question
    is a RewardInputError (the task's, not the judge's)."""
    question = None
    if question_key is not None:
        if question_key not in task_payload:
            raise RewardInputError(
                f"llm_judge: task payload has no key {question_key!r} (keys: "
                f"{', '.join(sorted(task_payload)) or 'none'}); set reward_fn_args.question_key "
                "to the column holding the question, or null to ask without it"
            )
        question = str(task_payload[question_key])
    answer = None
    if answer_key is not None and task_payload.get(answer_key) is not None:
        answer = str(task_payload[answer_key])
    messages = judge_messages(rubric, question, response_text, answer, min_score, max_score)
    info: RewardInfo = {
        "judge_model": judge_model,
        "judge_fallback": 0.0,
        "judge_parse_failure": 0.0,
        "judge_call_failure": 0.0,
    }
    try:
        reply = auxiliary_model.chat(
            messages, max_tokens=max_tokens, temperature=temperature, timeout_s=timeout_s
        )
    except EngineError as exc:
        info |= {"judge_fallback": 1.0, "judge_call_failure": 1.0, "judge_error": str(exc)[:200]}
        return float(fallback_reward), info
    info["judge_reply"] = reply[:REPLY_KEPT]
    score = parse_score(reply, min_score, max_score)
    if score is None:
        info |= {"judge_fallback": 1.0, "judge_parse_failure": 1.0}
        return float(fallback_reward), info
    info["judge_score"] = score
    return (score - min_score) / (max_score - min_score), info


def judge_args_issues(reward_fn_args: Mapping[str, Any], path: str, cfg: Any = None) -> list[Issue]:
    """The entry's load-time check: a score range and a timeout that can work."""
    issues = []
    low = reward_fn_args.get("min_score", 0.0)
    high = reward_fn_args.get("max_score", 10.0)
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high))
    if not numbers or high <= low:
        issues.append(
            Issue(
                f"{path}.reward_fn_args.max_score",
                f"must be a number above min_score ({low!r}), got {high!r}",
            )
        )
    timeout = reward_fn_args.get("timeout_s", 30.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        issues.append(
            Issue(f"{path}.reward_fn_args.timeout_s", f"must be a number > 0, got {timeout!r}")
        )
    return issues


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
