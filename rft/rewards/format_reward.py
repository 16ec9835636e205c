"""`format_reward`: does the reply state its answer in the expected form?

Styles: `boxed` (\\boxed{...}), `answer_line` ("Answer: N"), `think_answer`
(`<think>...</think>` then `<answer>...</answer>`), or `any` of those.
"""

from __future__ import annotations

import re
from typing import Any

from rft.errors import ConfigError
from rft.rewards.registry import RewardInfo

FORMAT_STYLES: dict[str, re.Pattern[str]] = {
    "boxed": re.compile(r"\\boxed\{[^{}]+\}"),
    "answer_line": re.compile(r"^\s*answer\s*:\s*\S+", re.IGNORECASE | re.MULTILINE),
    "think_answer": re.compile(
        r"^\s*<think>.*?</think>\s*<answer>.+?</answer>\s*$", re.DOTALL | re.IGNORECASE
    ),
}


def format_reward(
    response_text: str,
    task_payload: dict[str, Any],
    *,
    answer_key: str = "answer",
    style: str = "any",
    matched_reward: float = 1.0,
    unmatched_reward: float = 0.0,
) -> tuple[float, RewardInfo]:
    """`matched_reward` when the reply matches `style`, else `unmatched_reward`.

    `answer_key` is accepted for the shared signature; the format check ignores the answer.
    """
    del answer_key
    if style == "any":
        styles = list(FORMAT_STYLES)
    elif style in FORMAT_STYLES:
        styles = [style]
    else:
        raise ConfigError(
            f"format_reward: style {style!r} unknown (known: any, {', '.join(FORMAT_STYLES)})"
        )
    matched = [name for name in styles if FORMAT_STYLES[name].search(response_text)]
    info: RewardInfo = {"format_ok": float(bool(matched)), "style": matched[0] if matched else ""}
    return (matched_reward if matched else unmatched_reward), info
