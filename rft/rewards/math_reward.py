"""`math_reward` and `accuracy_reward`: is the last number of the reply the reference answer?

Both read the reference from `task_payload[answer_key]` (an int, a float, or a string whose last
number is the answer, such as GSM8K's "... #### 72") and compare exact decimal values.
`accuracy_reward` also accepts non-numeric answers, compared as normalised text.
"""

from __future__ import annotations

import re
from typing import Any

from rft.rewards.number_parsing import answer_value, last_number
from rft.rewards.registry import RewardInfo, RewardInputError, payload_field

_FINAL_ANSWER = re.compile(r"\\boxed\{([^{}]*)\}|answer\s*(?:is|:)\s*(.+)", re.IGNORECASE)


def math_reward(
    response_text: str,
    task_payload: dict[str, Any],
    *,
    answer_key: str = "answer",
    correct_reward: float = 1.0,
    wrong_reward: float = 0.0,
) -> tuple[float, RewardInfo]:
    """`correct_reward` when the last number in the reply equals the answer, else `wrong_reward`.

    A reply without any number scores `wrong_reward` with info["parsed"] == "".
    """
    expected = answer_value(payload_field(task_payload, answer_key, "math_reward"))
    if expected is None:
        raise RewardInputError(
            f"math_reward: task payload[{answer_key!r}] = "
            f"{str(task_payload[answer_key])[:80]!r} holds no number"
        )
    parsed = last_number(response_text)
    correct = parsed is not None and parsed == expected
    info: RewardInfo = {
        "parsed": "" if parsed is None else str(parsed),
        "expected": str(expected),
        "correct": 1.0 if correct else 0.0,
    }
    return (correct_reward if correct else wrong_reward), info


def accuracy_reward(
    response_text: str,
    task_payload: dict[str, Any],
    *,
    answer_key: str = "answer",
) -> tuple[float, RewardInfo]:
    """1.0 for a correct final answer, else 0.0.

    Numeric answers are checked like `math_reward`. A non-numeric answer is compared, case- and
    space-insensitively, with the reply's final answer: the content of its last \\boxed{...}, the
    text after its last "answer is"/"answer:", or else its last non-empty line.
    """
    raw = payload_field(task_payload, answer_key, "accuracy_reward")
    if answer_value(raw) is not None:
        return math_reward(response_text, task_payload, answer_key=answer_key)
    expected = _normalise(str(raw))
    parsed = _normalise(final_answer_text(response_text))
    correct = bool(parsed) and parsed == expected
    info: RewardInfo = {"parsed": parsed, "expected": expected, "correct": float(correct)}
    return float(correct), info


def final_answer_text(response_text: str) -> str:
    """The reply's stated final answer: last \\boxed{}, last "answer is/:", or last line."""
    matches = list(_FINAL_ANSWER.finditer(response_text))
    if matches:
        last = matches[-1]
        return last.group(1) if last.group(1) is not None else last.group(2)
    lines = [line for line in response_text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _normalise(text: str) -> str:
    return " ".join(text.strip().rstrip(".").lower().split())
