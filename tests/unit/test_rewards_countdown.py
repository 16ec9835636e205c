"""The safe arithmetic parser and the countdown checker."""

from __future__ import annotations

import contextlib
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.rewards import REWARD_FUNCTIONS
from rft.rewards.arithmetic_expression import (
    MAX_EXPRESSION_CHARS,
    ExpressionError,
    parse_expression,
)
from rft.rewards.countdown_reward import extract_equation

countdown = REWARD_FUNCTIONS.get("countdown_reward")
PUZZLE = {"numbers": [3, 5, 2], "target": 16}


def expressions(max_leaves: int = 6) -> st.SearchStrategy[tuple[str, Fraction | None]]:
    """(text, exact value or None on division by zero), built with Python Fractions."""
    leaves = st.integers(min_value=0, max_value=999).map(lambda n: (str(n), Fraction(n)))

    def combine(children: st.SearchStrategy) -> st.SearchStrategy:
        def join(a, op, b):
            (ta, va), (tb, vb) = a, b
            text = f"({ta} {op} {tb})"
            if va is None or vb is None:
                return text, None
            if op == "/":
                return text, None if vb == 0 else va / vb
            return text, {"+": va + vb, "-": va - vb, "*": va * vb}[op]

        return st.builds(join, children, st.sampled_from("+-*/"), children)

    return st.recursive(leaves, combine, max_leaves=max_leaves)


@given(expressions())
def test_parser_matches_fraction_reference(case: tuple[str, Fraction | None]) -> None:
    text, value = case
    if value is None:
        with pytest.raises(ExpressionError, match="division by zero"):
            parse_expression(text)
    else:
        assert parse_expression(text).value == value


def test_precedence_and_literals() -> None:
    parsed = parse_expression("2 + 3 * 4 - 10 / 5")
    assert parsed.value == 12
    assert parsed.literals == (2, 3, 4, 10, 5)
    assert parse_expression("6/4*2").value == 3


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "2 ** 10",
        "3 + x",
        "1e3",
        "2.5 * 2",
        "-3 + 5",
        "(1 + 2",
        "1 + 2)",
        "",
        "4 4",
        "open('f')",
        "(" * 40 + "1" + ")" * 40,
        "1+" * (MAX_EXPRESSION_CHARS // 2) + "1",
    ],
)
def test_parser_rejects(text: str) -> None:
    with pytest.raises(ExpressionError):
        parse_expression(text)


def test_unary_only_when_allowed() -> None:
    assert parse_expression("-3 + 5", allow_unary=True).value == 2
    assert parse_expression("--3", allow_unary=True).value == 3


@given(st.text(max_size=60))
def test_parser_never_raises_anything_else(text: str) -> None:
    with contextlib.suppress(ExpressionError):
        parse_expression(text)


@pytest.mark.parametrize(
    ("reply", "reward", "reason"),
    [
        ("<answer>(3 + 5) * 2</answer>", 1.0, "ok"),
        ("Let me see.\n(3+5)*2 = 16", 1.0, "ok"),
        ("<answer>2 * (5 + 3) = 16</answer>", 1.0, "ok"),
        ("<answer>3 * 5 + 2</answer>", 0.1, "wrong value"),
        ("<answer>(3 + 5) * 2 * 1</answer>", 0.1, "not given"),
        ("<answer>(5 + 5) + 3 * 2</answer>", 0.1, "reused"),
        ("<answer>3 * 5 + 1</answer>", 0.1, "not given"),
        ("<answer>(3 + 5) * 2 + 0</answer>", 0.1, "not given"),
        ("<answer>16</answer>", 0.1, "not given"),
        ("<answer>3 + 5</answer>", 0.1, "unused"),
        ("<answer>import os</answer>", 0.0, "unparsable"),
        ("<answer>(3 + 5) ** 2</answer>", 0.0, "unparsable"),
        ("", 0.0, "unparsable"),
    ],
)
def test_countdown_reward(reply: str, reward: float, reason: str) -> None:
    got, info = countdown(reply, PUZZLE)
    assert got == reward
    assert reason in str(info["reason"])


def test_countdown_partial_use_allowed_when_asked() -> None:
    got, _ = countdown(
        "<answer>(3 + 5) * 2</answer>",
        {"numbers": [3, 5, 2, 9], "target": 16},
        require_all_numbers=False,
    )
    assert got == 1.0
    got, _ = countdown("<answer>(3 + 5) * 2</answer>", {"numbers": [3, 5, 2, 9], "target": 16})
    assert got == 0.1


def test_countdown_duplicate_numbers_may_each_be_used_once() -> None:
    puzzle = {"numbers": [4, 4, 2], "target": 32}
    assert countdown("<answer>4 * 4 * 2</answer>", puzzle)[0] == 1.0
    assert countdown("<answer>4 * 4 * 4 / 2</answer>", puzzle)[0] == 0.1


def test_countdown_last_answer_block_wins() -> None:
    reply = "<answer>1 + 1</answer> no wait <answer>(3 + 5) * 2</answer>"
    assert extract_equation(reply) == "(3 + 5) * 2"
    assert countdown(reply, PUZZLE)[0] == 1.0


def test_countdown_answer_key_names_target() -> None:
    got, _ = countdown(
        "<answer>(3+5)*2</answer>",
        {"nums": [3, 5, 2], "goal": 16},
        answer_key="goal",
        numbers_key="nums",
    )
    assert got == 1.0
