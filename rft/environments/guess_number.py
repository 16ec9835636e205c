"""`guess_number`: find a seeded whole number in [low, high] from higher/lower feedback.

Each reply is one guess: the last number in it. The answer to a guess is "higher", "lower" or
"correct"; a reply without a whole number, or one outside the range, costs a turn. Reward 1 for the
correct guess, else 0. The default turn budget is enough for a binary search plus one spare turn.
"""

from __future__ import annotations

from rft.environments.protocol import ENVIRONMENTS, Episode, StepResult
from rft.environments.seed_splits import instance_random
from rft.errors import ConfigError
from rft.rewards.number_parsing import last_number


def parse_guess(reply: str) -> int | None:
    """The last number in `reply` when it is a whole number, else None."""
    value = last_number(reply)
    if value is None or value != value.to_integral_value():
        return None
    return int(value)


def binary_search_turns(low: int, high: int) -> int:
    """Guesses a binary search needs, at most, to find any number in [low, high]."""
    return (high - low + 1).bit_length()


@ENVIRONMENTS.register("guess_number")
class GuessNumber:
    """A number in [`low`, `high`]; `max_turns` guesses (default: a binary search's worst case + 1)."""

    tools: tuple[str, ...] = ()

    def __init__(self, low: int = 1, high: int = 100, max_turns: int | None = None) -> None:
        if high <= low:
            raise ConfigError(f"guess_number: high ({high}) must be above low ({low})")
        self.low, self.high = low, high
        self.max_turns = max_turns if max_turns is not None else binary_search_turns(low, high) + 1
        self.episode = Episode("guess_number", self.max_turns)
        self.target = low

    def reset(self, seed: int) -> str:
        self.target = instance_random("guess_number", f"{self.low}:{self.high}", seed).randint(
            self.low, self.high
        )
        self.episode.begin()
        return (
            f"I am thinking of a whole number from {self.low} to {self.high}. Guess it: reply "
            "with one number. After each guess I tell you whether my number is higher or lower. "
            f"You have {self.max_turns} guesses."
        )

    def step(self, action: str) -> StepResult:
        self.episode.count_step()
        guess = parse_guess(action)
        if guess is None:
            outcome = "invalid"
            text = f"Reply with one whole number from {self.low} to {self.high}."
        elif not self.low <= guess <= self.high:
            outcome = "out_of_range"
            text = f"{guess} is outside {self.low} to {self.high}."
        elif guess == self.target:
            outcome, text = "correct", f"{guess} is correct!"
        else:
            outcome = "higher" if self.target > guess else "lower"
            text = f"My number is {outcome} than {guess}."
        ended = outcome == "correct"
        if not ended and self.episode.out_of_steps:
            ended, text = True, f"{text} You are out of guesses; the number was {self.target}."
        self.episode.finish(ended)
        reward = 1.0 if outcome == "correct" else 0.0
        info: dict[str, float | str] = {"outcome": outcome, "guess": "" if guess is None else guess}
        return StepResult(text, reward, ended, info)
