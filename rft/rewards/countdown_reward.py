"""`countdown_reward`: does the reply's equation use the given numbers once each and hit the target?

The equation is read from the last `<answer>...</answer>` block, or else the reply's last non-empty
line; a trailing "= <result>" is dropped. It is parsed by `arithmetic_expression` (no `eval`).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from rft.rewards.arithmetic_expression import ExpressionError, parse_expression
from rft.rewards.registry import RewardInfo, RewardInputError, payload_field

_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def countdown_reward(
    response_text: str,
    task_payload: dict[str, Any],
    *,
    answer_key: str = "target",
    numbers_key: str = "numbers",
    require_all_numbers: bool = True,
    correct_reward: float = 1.0,
    format_score: float = 0.1,
) -> tuple[float, RewardInfo]:
    """`correct_reward` for a valid equation equal to the target; `format_score` for an equation
    that parses but is wrong or misuses the numbers; 0.0 when no equation can be parsed.

    `answer_key` names the target field. Each given number may be used at most once (exactly once
    when `require_all_numbers`).
    """
    target = _as_int(payload_field(task_payload, answer_key, "countdown_reward"), answer_key)
    numbers_raw = payload_field(task_payload, numbers_key, "countdown_reward")
    if not isinstance(numbers_raw, list):
        raise RewardInputError(f"countdown_reward: payload[{numbers_key!r}] must be a list")
    numbers = [_as_int(n, numbers_key) for n in numbers_raw]

    equation = extract_equation(response_text)
    info: RewardInfo = {"equation": equation, "target": float(target)}
    try:
        parsed = parse_expression(equation)
    except ExpressionError as exc:
        info.update(reason=f"unparsable: {exc}", correct=0.0)
        return 0.0, info

    used, allowed = Counter(parsed.literals), Counter(numbers)
    if used - allowed:
        extra = sorted((used - allowed).elements())
        info.update(reason=f"uses numbers not given (or reused): {extra}", correct=0.0)
        return format_score, info
    if require_all_numbers and used != allowed:
        missing = sorted((allowed - used).elements())
        info.update(reason=f"leaves numbers unused: {missing}", correct=0.0)
        return format_score, info
    info["value"] = float(parsed.value)
    if parsed.value != target:
        info.update(reason="wrong value", correct=0.0)
        return format_score, info
    info.update(reason="ok", correct=1.0)
    return correct_reward, info


def extract_equation(response_text: str) -> str:
    """The candidate equation: last <answer> block, else the last non-empty line, minus "= N"."""
    blocks = _ANSWER_BLOCK.findall(response_text)
    if blocks:
        candidate = blocks[-1]
    else:
        lines = [line for line in response_text.splitlines() if line.strip()]
        candidate = lines[-1] if lines else ""
    return candidate.split("=", 1)[0].strip()


def _as_int(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise RewardInputError(f"countdown_reward: payload[{key!r}] must hold integers")
    try:
        return int(value)
    except ValueError as exc:
        raise RewardInputError(
            f"countdown_reward: payload[{key!r}] value {value!r} is not an integer"
        ) from exc
