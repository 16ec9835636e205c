"""Generators: deterministic by seed, answers right when recomputed independently."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.errors import ConfigError
from rft.producers.generators import TASK_GENERATORS
from rft.rewards import REWARD_FUNCTIONS

arithmetic = TASK_GENERATORS.get("arithmetic")
countdown = TASK_GENERATORS.get("countdown")


def test_registry_names() -> None:
    assert {"arithmetic", "countdown"} <= set(TASK_GENERATORS.names())


@given(st.integers(0, 2**32), st.integers(1, 6), st.sets(st.sampled_from("+-*"), min_size=1))
@settings(max_examples=40)
def test_arithmetic_answers_and_determinism(seed: int, digits: int, ops: set[str]) -> None:
    first = arithmetic(seed=seed, num_tasks=25, digits=digits, operators=sorted(ops))
    again = arithmetic(seed=seed, num_tasks=25, digits=digits, operators=sorted(ops))
    assert first.rows == again.rows
    for row in first.rows:
        match = re.fullmatch(r"What is (\d+) ([-+*]) (\d+)\?", row["question"])
        assert match, row["question"]
        a, op, b = int(match[1]), match[2], int(match[3])
        assert op in ops
        assert len(str(a)) == digits and len(str(b)) == digits
        expected = a + b if op == "+" else a - b if op == "-" else a * b
        assert row["answer"] == expected


def test_arithmetic_seeds_differ() -> None:
    assert arithmetic(seed=1).rows != arithmetic(seed=2).rows


def test_arithmetic_rejects_bad_args() -> None:
    with pytest.raises(ConfigError, match="operators"):
        arithmetic(operators=["/"])
    with pytest.raises(ConfigError, match="digits"):
        arithmetic(digits=0)


@given(st.integers(0, 2**32), st.integers(2, 5))
@settings(max_examples=30, deadline=None)
def test_countdown_reachable_by_construction(seed: int, num_numbers: int) -> None:
    generated = countdown(seed=seed, num_tasks=10, num_numbers=num_numbers, max_number=30)
    assert (
        generated.rows
        == countdown(seed=seed, num_tasks=10, num_numbers=num_numbers, max_number=30).rows
    )
    reward = REWARD_FUNCTIONS.get("countdown_reward")
    for row in generated.rows:
        assert len(row["numbers"]) == num_numbers
        assert all(1 <= n <= 30 for n in row["numbers"])
        assert 1 <= row["target"] <= 1000
        assert str(row["target"]) in row["question"]
        # the stored solution passes the same checker a model's answer must pass
        score, info = reward(f"<answer>{row['solution']}</answer>", row)
        assert score == 1.0, info


def test_countdown_rejects_bad_args() -> None:
    with pytest.raises(ConfigError, match="num_numbers"):
        countdown(num_numbers=1)


@given(st.integers(0, 10_000), st.sampled_from([0.1, 0.25, 0.5]))
def test_arithmetic_holdout_parts_never_share_a_problem(seed: int, fraction: float) -> None:
    gen = TASK_GENERATORS.get("arithmetic")
    args = {"digits": 1, "max_operand": 19, "holdout_fraction": fraction, "seed": seed}
    train = {r["question"] for r in gen(num_tasks=300, holdout="train", **args).rows}
    test = {r["question"] for r in gen(num_tasks=60, holdout="test", **args).rows}
    assert train and test
    assert not train & test
    for row in gen(num_tasks=20, holdout="test", **args).rows:
        a, b = row["operands"]
        assert 0 <= a <= 19 and 0 <= b <= 19 and row["answer"] == a + b


def test_arithmetic_distinct_draws_without_replacement() -> None:
    gen = TASK_GENERATORS.get("arithmetic")
    rows = gen(num_tasks=80, digits=1, max_operand=19, holdout="test", distinct=True, seed=3).rows
    questions = [r["question"] for r in rows]
    assert len(set(questions)) == len(questions) == 80
    with pytest.raises(ConfigError, match="distinct 500 problems asked"):
        gen(num_tasks=500, digits=1, max_operand=19, holdout="test", distinct=True)
    with pytest.raises(ConfigError, match="holdout"):
        gen(num_tasks=5, holdout="validation")
