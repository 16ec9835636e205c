"""Finding numbers in free text: the last number of a model reply, and of a reference answer.

Handles signs (a '-' counts as a sign only when it does not follow a word or closing bracket, so
"5-3" yields 5 and 3), thousands separators ("1,234"), decimals, and trailing sentence periods.
Values are exact `Decimal`s so "19" equals "19.0".
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

NUMBER_PATTERN = re.compile(
    r"(?:(?<![\w)\]}])-)?"  # a sign, unless it reads as subtraction
    r"(?<![\d.])"  # never start inside another number
    r"(?:\d{1,3}(?:,\d{3})+(?!\d|,\d)|\d+)"  # 1,234,567 or plain digits
    r"(?:\.\d+)?"  # decimals; a bare trailing period is punctuation
)


def find_numbers(text: str) -> list[str]:
    """Every number in `text`, in order, as written (commas kept)."""
    return NUMBER_PATTERN.findall(text)


def to_decimal(number_text: str) -> Decimal | None:
    """`number_text` without thousands separators as a Decimal; None if it is not a number."""
    try:
        return Decimal(number_text.replace(",", ""))
    except InvalidOperation:
        return None


def last_number(text: str) -> Decimal | None:
    """The value of the last number in `text`, or None when there is none."""
    numbers = find_numbers(text)
    return to_decimal(numbers[-1]) if numbers else None


def answer_value(answer: object) -> Decimal | None:
    """The numeric value of a reference answer: an int/float, or the last number of a string.

    Strings such as GSM8K's "... #### 72" resolve to their last number.
    """
    if isinstance(answer, bool):
        return None
    if isinstance(answer, int):
        return Decimal(answer)
    if isinstance(answer, float):
        return Decimal(repr(answer))
    if isinstance(answer, str):
        return last_number(answer)
    return None
