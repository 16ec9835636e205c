"""`math_boxed_reward` and `math_dapo_reward`: the final answer checked for mathematical
equivalence with the reference by math-verify (Trinity-RFT's names for these two rewards).

Both compare with `rft.rewards.math_equivalence` (a child process with a deadline per
comparison), so `\\boxed{\\frac{1}{2}}`, `0.5` and `1/2` score alike, and sets, intervals,
percentages and answers with units are compared as values. An answer that runs out of time
scores as wrong, with info["timed_out"] = 1.0.

- `math_boxed_reward`: the answer is the last `\\boxed{...}` of the reply (none: wrong). Reward
  = accuracy (1 or 0) + a format score: with `with_think`, a reply without exactly one
  `<think>...</think>` gets `-format_score_coef`.
- `math_dapo_reward`: the answer is read from the text after the last `</think>`: its last
  `\\boxed{...}`, else whatever math-verify finds there (the last expression). Reward = accuracy.
  DAPO's overlong penalty needs token counts, which the trainer has: it is
  `algorithm.overlong_penalty` (set by `algorithm_type: dapo`), and Trinity's reward args for it
  are refused at load with that pointer (`dapo_args_issues`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rft.config.binding import Issue
from rft.rewards.math_equivalence import Verdict, shared_worker
from rft.rewards.registry import RewardInfo, RewardInputError, payload_field

_BOX_COMMANDS = ("\\boxed", "\\fbox")
# Trinity's DAPO reward args that configure the length penalty
_OVERLONG_ARGS = (
    "enable_overlong_penalty",
    "penalty_factor",
    "max_response_length",
    "cache_length",
)


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5`) in `text`, with
    nested braces kept; None when there is none or its braces never close."""
    start = max(text.rfind(command) for command in _BOX_COMMANDS)
    if start < 0:
        return None
    rest = text[start + 1 :].lstrip("abcdefghijklmnopqrstuvwxyz")
    if not rest.startswith("{"):
        word = rest.strip().split("$")[0].split()
        return word[0] if rest[:1].isspace() and word else None
    depth = 0
    for i, char in enumerate(rest):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return rest[1:i].strip()
    return None


def math_boxed_reward(
    response_text: str,
    task_payload: dict[str, Any],
    *,
    answer_key: str = "answer",
    with_think: bool = False,
    format_score_coef: float = 0.1,
    timeout_s: float = 5.0,
) -> tuple[float, RewardInfo]:
    """Accuracy of the reply's last `\\boxed{}` answer, plus the think-format score."""
    gold = _gold_text(task_payload, answer_key, "math_boxed_reward")
    answer = last_boxed(response_text)
    verdict = Verdict(False)
    if answer is not None:
        verdict = _compare(gold, answer, timeout_s)
        _require_gold_parsed(verdict, gold, answer_key, "math_boxed_reward")
    format_score = 0.0
    if with_think and not _one_think_block(response_text):
        format_score = -format_score_coef
    info = _info(verdict, gold, answer)
    info["format_score"] = format_score
    return float(verdict.equal) + format_score, info


def math_dapo_reward(
    response_text: str,
    task_payload: dict[str, Any],
    *,
    answer_key: str = "answer",
    timeout_s: float = 5.0,
) -> tuple[float, RewardInfo]:
    """Accuracy of the answer after the reply's last `</think>` (its last `\\boxed{}`, else its
    last expression)."""
    gold = _gold_text(task_payload, answer_key, "math_dapo_reward")
    tail = response_text.rsplit("</think>", 1)[-1]
    boxed = last_boxed(tail)
    answer = tail if boxed is None else boxed
    verdict = _compare(gold, answer, timeout_s, boxed=boxed is not None)
    _require_gold_parsed(verdict, gold, answer_key, "math_dapo_reward")
    info = _info(verdict, gold, boxed)
    return float(verdict.equal), info


def dapo_args_issues(reward_fn_args: Mapping[str, Any], path: str, cfg: Any = None) -> list[Issue]:
    """Trinity's overlong-penalty args of math_dapo_reward, refused with where rft applies it."""
    return [
        Issue(
            f"{path}.reward_fn_args.{name}",
            "math_dapo_reward scores the answer only: rft applies DAPO's overlong penalty in the "
            "trainer, where token counts are known; set algorithm.overlong_penalty "
            "{penalty_factor, max_response_length, cache_length} (algorithm_type dapo sets "
            "penalty_factor 1.0)",
        )
        for name in _OVERLONG_ARGS
        if name in reward_fn_args
    ]


def _gold_text(task_payload: dict[str, Any], answer_key: str, reward_name: str) -> str:
    raw = payload_field(task_payload, answer_key, reward_name)
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise RewardInputError(
            f"{reward_name}: task payload[{answer_key!r}] must be text or a number, "
            f"got {type(raw).__name__}"
        )
    text = str(raw)
    boxed = last_boxed(text)  # a reference solution: its boxed answer
    return text if boxed is None else boxed


def _compare(gold: str, answer: str, timeout_s: float, *, boxed: bool = True) -> Verdict:
    # both sides as boxed LaTeX so math-verify reads them the same way; free text is given as is
    return shared_worker().compare(
        f"\\boxed{{{gold}}}", f"\\boxed{{{answer}}}" if boxed else answer, timeout_s
    )


def _require_gold_parsed(verdict: Verdict, gold: str, answer_key: str, reward_name: str) -> None:
    # a reference math-verify reads as nothing makes every reply wrong: the task row is bad
    if not (verdict.gold_parsed or verdict.timed_out or verdict.error):
        raise RewardInputError(
            f"{reward_name}: task payload[{answer_key!r}] = {gold[:80]!r} is no answer "
            "math-verify can read"
        )


def _info(verdict: Verdict, gold: str, answer: str | None) -> RewardInfo:
    return {
        "accuracy": float(verdict.equal),
        "parsed": verdict.answer_parsed,
        "expected": verdict.gold_parsed or gold[:200],
        "boxed": float(answer is not None),
        "timed_out": float(verdict.timed_out),
        "error": verdict.error,
    }


def _one_think_block(text: str) -> bool:
    opened, closed = text.find("<think>"), text.find("</think>")
    single = text.count("<think>") == 1 and text.count("</think>") == 1
    return single and opened < closed
