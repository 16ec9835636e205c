"""The `countdown` generator: reach a target from given numbers with + - * /, each used once.

Every target is reachable by construction: the generator combines all the drawn numbers into a
random expression with exact integer steps (no negative or fractional intermediates) and keeps
the expression as `solution`. Rows: question, numbers, target, solution.
"""

from __future__ import annotations

import random

from rft.errors import ConfigError
from rft.producers.generators.registry import GeneratedTaskset

MAX_ATTEMPTS_PER_TASK = 1000

QUESTION = (
    "Using the numbers {numbers}, create an equation that equals {target}. "
    "You can use +, -, * and /, and must use each number exactly once. "
    "Show your work, then give the equation alone in <answer></answer> tags, "
    "for example <answer>(1 + 2) / 3</answer>."
)


def _combine(rng: random.Random, a: tuple[int, str], b: tuple[int, str]) -> tuple[int, str]:
    """One random exact step over two (value, expression) pairs; the larger value goes first."""
    (x, ex), (y, ey) = (a, b) if a[0] >= b[0] else (b, a)
    choices = [(x + y, f"{ex} + {ey}"), (x * y, f"{ex} * {ey}")]
    if x > y:
        choices.append((x - y, f"{ex} - {ey}"))
    if y > 1 and x % y == 0:
        choices.append((x // y, f"{ex} / {ey}"))
    value, text = rng.choice(choices)
    return value, f"({text})"


def countdown(
    *,
    seed: int = 0,
    num_tasks: int = 100,
    num_numbers: int = 3,
    max_number: int = 50,
    max_target: int = 1000,
) -> GeneratedTaskset:
    """`num_tasks` puzzles of `num_numbers` numbers in 1..`max_number`, targets in 1..`max_target`."""
    if not 2 <= num_numbers <= 8:
        raise ConfigError(f"generator_args.num_numbers must be 2..8, got {num_numbers}")
    if max_number < 2 or max_target < 1:
        raise ConfigError("generator_args.max_number must be >= 2 and max_target >= 1")
    if num_tasks < 0:
        raise ConfigError(f"generator_args.num_tasks must be >= 0, got {num_tasks}")
    rng = random.Random(seed)
    rows = []
    for task_number in range(num_tasks):
        for _ in range(MAX_ATTEMPTS_PER_TASK):
            numbers = [rng.randint(1, max_number) for _ in range(num_numbers)]
            pool = [(n, str(n)) for n in numbers]
            while len(pool) > 1:
                rng.shuffle(pool)
                pool.append(_combine(rng, pool.pop(), pool.pop()))
            target, solution = pool[0]
            if 1 <= target <= max_target:
                break
        else:
            raise ConfigError(
                f"countdown: no target within 1..{max_target} after {MAX_ATTEMPTS_PER_TASK} "
                f"tries for task {task_number}; raise max_target or lower max_number"
            )
        rows.append(
            {
                "question": QUESTION.format(numbers=numbers, target=target),
                "numbers": numbers,
                "target": target,
                "solution": solution[1:-1],
            }
        )
    return GeneratedTaskset(
        rows=rows,
        default_format={"prompt_key": "question", "response_key": "target"},
        default_workflow="countdown_workflow",
        default_reward_fn="countdown_reward",
    )
