"""Last-number parsing and the math / accuracy / format rewards."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.errors import ConfigError
from rft.rewards import REWARD_FUNCTIONS, RewardInputError
from rft.rewards.number_parsing import answer_value, find_numbers, last_number


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is 42.", Decimal(42)),
        ("It drops to -7", Decimal(-7)),
        ("temperature: -3.5 degrees", Decimal("-3.5")),
        ("so 5-3 = 2", Decimal(2)),
        ("total 1,234,567 apples", Decimal(1234567)),
        ("numbers 1,234, and then nothing", Decimal(1234)),
        ("pick 1,2,3", Decimal(3)),
        ("costs 12.50.", Decimal("12.5")),
        ("Answer: 0019", Decimal(19)),
        ("(-4)", Decimal(-4)),
        ("x2 - 8", Decimal(8)),
        ("no digits here", None),
        ("", None),
        ("version 3.", Decimal(3)),
    ],
)
def test_last_number(text: str, expected: Decimal | None) -> None:
    assert last_number(text) == expected


def test_subtraction_is_not_a_sign() -> None:
    assert find_numbers("10-3") == ["10", "3"]
    assert find_numbers("a -3") == ["-3"]


@given(st.integers(min_value=-(10**12), max_value=10**12), st.sampled_from(["", ".", "!", " "]))
def test_any_integer_written_last_is_read_back(value: int, tail: str) -> None:
    assert last_number(f"first 17 then {value}{tail}") == Decimal(value)


@given(st.integers(min_value=1000, max_value=10**15))
def test_thousands_separators(value: int) -> None:
    assert last_number(f"It is {value:,} in total.") == Decimal(value)


def test_answer_value_forms() -> None:
    assert answer_value(19) == Decimal(19)
    assert answer_value(2.5) == Decimal("2.5")
    assert answer_value("Natalia sold 48/2 = 24 clips.\n#### 72") == Decimal(72)
    assert answer_value(True) is None
    assert answer_value(None) is None


math_reward = REWARD_FUNCTIONS.get("math_reward")


@pytest.mark.parametrize(
    ("reply", "answer", "reward"),
    [
        ("12 + 7 = 19", 19, 1.0),
        ("Answer: 19.", "19", 1.0),
        ("it is 19.0", 19, 1.0),
        ("first 19, then I double-check: 20", 19, 0.0),
        ("I don't know", 19, 0.0),
        ("The result is -150.", -150, 1.0),
        ("The result is 150.", -150, 0.0),
        ("That makes 1,234.", "1,234", 1.0),
        ("#### 72", "She sold 48 + 24 = 72.\n#### 72", 1.0),
    ],
)
def test_math_reward(reply: str, answer: object, reward: float) -> None:
    got, info = math_reward(reply, {"answer": answer})
    assert got == reward
    assert info["correct"] == reward


def test_math_reward_reports_parse() -> None:
    _, info = math_reward("no number", {"answer": 3})
    assert info == {"parsed": "", "expected": "3", "correct": 0.0}


def test_math_reward_answer_key_and_custom_values() -> None:
    got, _ = math_reward(
        "5", {"solution": 5}, answer_key="solution", correct_reward=2.0, wrong_reward=-1.0
    )
    assert got == 2.0
    got, _ = math_reward("6", {"solution": 5}, answer_key="solution", wrong_reward=-1.0)
    assert got == -1.0


def test_math_reward_missing_answer_names_key() -> None:
    with pytest.raises(RewardInputError, match="'answer'.*keys: question"):
        math_reward("5", {"question": "?"})
    with pytest.raises(RewardInputError, match="holds no number"):
        math_reward("5", {"answer": "five"})


def test_accuracy_reward_numeric_and_text() -> None:
    accuracy = REWARD_FUNCTIONS.get("accuracy_reward")
    assert accuracy("so 3", {"answer": 3})[0] == 1.0
    assert accuracy("The answer is Paris.", {"answer": "paris"})[0] == 1.0
    assert accuracy("I think \\boxed{Lyon}", {"answer": "Paris"})[0] == 0.0
    assert accuracy("Thinking...\n  Paris  ", {"answer": "Paris"})[0] == 1.0
    assert accuracy("", {"answer": "Paris"})[0] == 0.0


@pytest.mark.parametrize(
    ("reply", "style", "ok"),
    [
        ("so \\boxed{19}", "boxed", True),
        ("so 19", "boxed", False),
        ("work\nAnswer: 19", "answer_line", True),
        ("the answer: is", "answer_line", False),
        ("<think>add</think> <answer>19</answer>", "think_answer", True),
        ("<answer>19</answer>", "think_answer", False),
        ("Answer: 4", "any", True),
        ("4", "any", False),
    ],
)
def test_format_reward(reply: str, style: str, ok: bool) -> None:
    reward, info = REWARD_FUNCTIONS.get("format_reward")(reply, {}, style=style)
    assert reward == (1.0 if ok else 0.0)
    assert info["format_ok"] == float(ok)


def test_format_reward_unknown_style() -> None:
    with pytest.raises(ConfigError, match="style 'latex'"):
        REWARD_FUNCTIONS.get("format_reward")("x", {}, style="latex")


def test_unknown_reward_name_suggests() -> None:
    with pytest.raises(ConfigError, match="did you mean 'math_reward'"):
        REWARD_FUNCTIONS.get("math_rewards")
