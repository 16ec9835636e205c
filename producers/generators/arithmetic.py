"""The `arithmetic` generator: "What is a <op> b?" with the exact integer answer in the row.

Operands have `digits` digits each (1-digit operands include 0), or lie in
[`min_operand`, `max_operand`]; operators come from `operators` (any of "+", "-", "*").
`holdout` splits the problem space itself (by a hash of the question) into a train and a test part,
so an eval taskset of `holdout: test` never shares a problem with `holdout: train`.
Rows: question, answer, operands, operator.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable

from rft.errors import ConfigError
from rft.producers.generators.registry import GeneratedTaskset

OPERATIONS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


HOLDOUT_PARTS: dict[str, Callable[[float, float], bool]] = {
    "none": lambda bucket, fraction: True,
    "train": lambda bucket, fraction: bucket >= fraction,
    "test": lambda bucket, fraction: bucket < fraction,
}


def _bucket(question: str) -> float:
    """A stable number in [0, 1) for a question: which holdout part it belongs to."""
    digest = hashlib.sha256(question.encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def arithmetic(
    *,
    seed: int = 0,
    num_tasks: int = 100,
    digits: int = 2,
    operators: list[str] | str = "+",
    min_operand: int | None = None,
    max_operand: int | None = None,
    holdout: str = "none",
    holdout_fraction: float = 0.25,
    distinct: bool = False,
) -> GeneratedTaskset:
    """`num_tasks` two-operand problems drawn from `random.Random(seed)`.

    holdout "train" / "test" keeps only problems whose question hashes into that part (the test
    part is `holdout_fraction` of the problem space); "none" keeps all. `distinct` draws without
    replacement (an eval set with no repeated problem).
    """
    ops = list(operators)
    unknown = [op for op in ops if op not in OPERATIONS]
    if unknown or not ops:
        raise ConfigError(
            f"generator_args.operators: {unknown or ops!r} not allowed (choose from + - *)"
        )
    if not 1 <= digits <= 18:
        raise ConfigError(f"generator_args.digits must be 1..18, got {digits}")
    if num_tasks < 0:
        raise ConfigError(f"generator_args.num_tasks must be >= 0, got {num_tasks}")
    if holdout not in HOLDOUT_PARTS:
        raise ConfigError(
            f"generator_args.holdout must be one of {sorted(HOLDOUT_PARTS)}, got {holdout!r}"
        )
    if not 0.0 < holdout_fraction < 1.0:
        raise ConfigError(
            f"generator_args.holdout_fraction must be in (0, 1), got {holdout_fraction}"
        )
    low = (0 if digits == 1 else 10 ** (digits - 1)) if min_operand is None else min_operand
    high = 10**digits - 1 if max_operand is None else max_operand
    if low > high:
        raise ConfigError(f"generator_args: min_operand {low} > max_operand {high}")
    rng = random.Random(seed)
    keep = HOLDOUT_PARTS[holdout]
    if distinct:
        space = (high - low + 1) ** 2 * len(ops)
        problems = (
            [
                (a, op, b)
                for op in ops
                for a in range(low, high + 1)
                for b in range(low, high + 1)
                if keep(_bucket(f"What is {a} {op} {b}?"), holdout_fraction)
            ]
            if space <= 100_000
            else []
        )
        if num_tasks > len(problems):
            available = len(problems) if space <= 100_000 else "too many to enumerate"
            raise ConfigError(
                f"generator_args: distinct {num_tasks} problems asked, {available} available"
            )
        chosen = rng.sample(problems, num_tasks)
    else:
        chosen = []
        attempts = 0
        while len(chosen) < num_tasks:
            a, b = rng.randint(low, high), rng.randint(low, high)
            op = rng.choice(ops)
            attempts += 1
            if holdout == "none" or keep(_bucket(f"What is {a} {op} {b}?"), holdout_fraction):
                chosen.append((a, op, b))
            elif attempts > 1000 * (num_tasks + 1):
                raise ConfigError(f"generator_args: holdout {holdout!r} leaves no problem")
    rows = []
    for a, op, b in chosen:
        rows.append(
            {
                "question": f"What is {a} {op} {b}?",
                "answer": OPERATIONS[op](a, b),
                "operands": [a, b],
                "operator": op,
            }
        )
    return GeneratedTaskset(
        rows=rows,
        default_format={"prompt_key": "question", "response_key": "answer"},
        default_workflow="math_workflow",
        default_reward_fn="math_reward",
    )
