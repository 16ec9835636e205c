"""The `arithmetic` generator: "What is a <op> b?" with the exact integer answer in the row.

Operands have `digits` digits each (1-digit operands include 0); operators come from `operators`
(any of "+", "-", "*"). Rows: question, answer, operands, operator.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from producers.generators.registry import TASK_GENERATORS, GeneratedTaskset
from rft.errors import ConfigError

OPERATIONS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


@TASK_GENERATORS.register("arithmetic")
def arithmetic(
    *,
    seed: int = 0,
    num_tasks: int = 100,
    digits: int = 2,
    operators: list[str] | str = "+",
) -> GeneratedTaskset:
    """`num_tasks` two-operand problems drawn from `random.Random(seed)`."""
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
    low = 0 if digits == 1 else 10 ** (digits - 1)
    high = 10**digits - 1
    rng = random.Random(seed)
    rows = []
    for _ in range(num_tasks):
        a, b = rng.randint(low, high), rng.randint(low, high)
        op = rng.choice(ops)
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
