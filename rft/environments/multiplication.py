"""`multiplication`: a tool task: multiply two seeded 3- to 4-digit numbers, with the calculator.

The model is told to use the `calculator` tool (small models cannot multiply such numbers in their
heads) and to end with `Answer: <number>`. The environment takes one step, the final reply: its
answer is the number after the last "answer" in it, or failing that its last number (thousands
separators allowed). Reward 1 if that equals the product exactly, else 0. `max_turns` counts the
model's turns, tool calls included.
"""

from __future__ import annotations

import re

from rft.environments.protocol import ENVIRONMENTS, Episode, StepResult
from rft.environments.seed_splits import instance_random
from rft.errors import ConfigError
from rft.rewards.number_parsing import find_numbers, last_number, to_decimal

_ANSWER = re.compile(r"answer", re.IGNORECASE)


def parse_answer(reply: str) -> int | None:
    """The whole number the reply gives as its answer (see the module docstring), else None."""
    markers = list(_ANSWER.finditer(reply))
    after = find_numbers(reply[markers[-1].end() :]) if markers else []
    value = to_decimal(after[0]) if after else last_number(reply)
    if value is None or value != value.to_integral_value():
        return None
    return int(value)


@ENVIRONMENTS.register("multiplication")
class Multiplication:
    """Factors of `min_digits` to `max_digits` digits each; `max_turns` model turns (default 4);
    `with_calculator: false` asks for the answer without offering the calculator."""

    tools: tuple[str, ...] = ("calculator",)

    def __init__(
        self,
        min_digits: int = 3,
        max_digits: int = 4,
        max_turns: int = 4,
        with_calculator: bool = True,
    ) -> None:
        if not 1 <= min_digits <= max_digits:
            raise ConfigError(
                f"multiplication: need 1 <= min_digits <= max_digits, got {min_digits}, {max_digits}"
            )
        self.min_digits, self.max_digits = min_digits, max_digits
        self.max_turns = max_turns
        # without the calculator: the same problems, answered in the model's head (a baseline)
        self.with_calculator = with_calculator
        self.tools = ("calculator",) if with_calculator else ()
        self.episode = Episode("multiplication", 1)
        self.factors = (0, 0)

    def reset(self, seed: int) -> str:
        rng = instance_random("multiplication", f"{self.min_digits}:{self.max_digits}", seed)
        digits = [rng.randint(self.min_digits, self.max_digits) for _ in range(2)]
        a, b = (rng.randint(10 ** (d - 1), 10**d - 1) for d in digits)
        self.factors = (a, b)
        self.episode.begin()
        how = "Use the calculator tool to compute it, then end" if self.with_calculator else "End"
        return f"What is {a} * {b}? {how} your reply with: Answer: <number>"

    @property
    def product(self) -> int:
        return self.factors[0] * self.factors[1]

    def step(self, action: str) -> StepResult:
        self.episode.count_step()
        answer = parse_answer(action)
        correct = answer == self.product
        self.episode.finish(True)
        if answer is None:
            text = "No answer found in the reply."
        else:
            text = "Correct." if correct else f"Wrong: {answer} is not {self.product}."
        info: dict[str, float | str] = {
            "outcome": "correct" if correct else "no_answer" if answer is None else "wrong",
            "answer": "" if answer is None else answer,
        }
        return StepResult(text, 1.0 if correct else 0.0, True, info)
