"""`date_difference`: days between two seeded dates, with a `days_between` tool of its own."""

import datetime as dt
import random
from typing import Annotated

from rft.producers.generators.tool_tasks import ToolTask, call, tool_task
from rft.rewards.number_parsing import last_number
from rft.tools import tool

Date = Annotated[str, "A date as YYYY-MM-DD"]


@tool("days_between")
def days_between(start: Date, end: Date) -> str:
    """The number of days from `start` to `end` (negative when `end` comes first)."""
    days = dt.date.fromisoformat(end) - dt.date.fromisoformat(start)
    return str(days.days)


@tool_task("date_difference")
class DateDifference(ToolTask[tuple[dt.date, dt.date]]):
    """Two dates at most `max_days` apart, between 1990 and 2030."""

    tools = ("days_between",)
    max_turns = 3

    def __init__(self, max_days: int = 2000) -> None:
        self.max_days = max_days

    def problem(self, rng: random.Random) -> tuple[dt.date, dt.date]:
        start = dt.date(1990, 1, 1) + dt.timedelta(days=rng.randrange(14000))
        return start, start + dt.timedelta(days=rng.randint(1, self.max_days))

    def question(self, problem: tuple[dt.date, dt.date], with_tools: bool) -> str:
        start, end = problem
        how = "Use the days_between tool, then end" if with_tools else "End"
        return f"How many days are there from {start} to {end}? {how} with: Answer: <number>"

    def verdict(self, reply: str, problem: tuple[dt.date, dt.date]) -> float:
        start, end = problem
        return float(last_number(reply) == (end - start).days)

    def oracle(self, problem: tuple[dt.date, dt.date]) -> list:
        start, end = problem
        return [
            call("days_between", start=str(start), end=str(end)),
            f"Answer: {(end - start).days}",
        ]
