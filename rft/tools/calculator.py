"""The `calculator` tool: exact arithmetic on a model-written expression, by a parser of its own.

Grammar (never Python `eval`): integers and decimals, `+ - * / // % **` (`^` and `×`, `÷` are
read as `**`, `*`, `/` because models write them), parentheses and unary signs. `**` binds tighter
than a unary minus and groups to the right, as in Python (`-2**2` is -4, `2**3**2` is 512). Values
are `Fraction`s, so results are exact; a non-integer power of a positive number is the one
approximate result and is marked `≈`. Input length, nesting depth, exponent and result size are
bounded, so a hostile expression cannot exhaust memory, time or the stack.
"""

from __future__ import annotations

import math
import operator
import re
from fractions import Fraction
from typing import Annotated

from rft.tools.registry import tool

MAX_EXPRESSION_CHARS = 1000
MAX_NESTING_DEPTH = 64
MAX_EXPONENT = 10_000
MAX_RESULT_BITS = 10_000  # numerator and denominator each; about 3,010 decimal digits

_TOKEN = re.compile(r"\s*(?:([0-9]+(?:\.[0-9]*)?|\.[0-9]+)|(\*\*|//|[-+*/%()^×÷]))")
_ALIASES = {"^": "**", "×": "*", "÷": "/"}
_APPROX_RANGE = (
    "an approximate result (a fractional power is involved) must stay between -1.8e308 and 1.8e308"
)
_TOO_LARGE = f"the result is too large (more than {MAX_RESULT_BITS} bits, about 3,010 digits)"


class CalculatorError(ValueError):
    """The expression is malformed or cannot be evaluated; the message says where and why."""


class _Value:
    """A Fraction, or a float when a non-integer power made the result approximate."""

    __slots__ = ("exact", "approx")

    def __init__(self, exact: Fraction | None, approx: float | None = None) -> None:
        self.exact = exact
        self.approx = approx

    def number(self) -> Fraction | float:
        return self.exact if self.exact is not None else float(self.approx or 0.0)


def evaluate(expression: str) -> Fraction | float:
    """The value of `expression`: an exact Fraction, or a float for a non-integer power."""
    return _Parser(tokenize(expression)).parse().number()


def tokenize(expression: str) -> list[tuple[str, int]]:
    """(token, position) pairs; CalculatorError at the first character that is not allowed."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(
            f"the expression has {len(expression)} characters; at most {MAX_EXPRESSION_CHARS}"
        )
    tokens: list[tuple[str, int]] = []
    pos = 0
    end = len(expression.rstrip())
    while pos < end:
        match = _TOKEN.match(expression, pos)
        if match is None:
            where = pos + len(expression[pos:]) - len(expression[pos:].lstrip())
            raise CalculatorError(
                f"character {expression[where]!r} at position {where} is not allowed "
                "(use digits, decimals, + - * / // % ** and parentheses)"
            )
        text = match.group(1) or match.group(2)
        tokens.append((_ALIASES.get(text, text), match.start(match.lastindex or 0)))
        pos = match.end()
    if not tokens:
        raise CalculatorError("the expression is empty")
    return tokens


class _Parser:
    """Recursive descent: expr := term (('+'|'-') term)*; term := unary (('*'|'/'|'//'|'%')
    unary)*; unary := ('+'|'-') unary | power; power := atom ('**' unary)?; atom := NUMBER |
    '(' expr ')'."""

    def __init__(self, tokens: list[tuple[str, int]]) -> None:
        self.tokens = tokens
        self.index = 0
        self.depth = 0

    def parse(self) -> _Value:
        value = self.expr()
        if self.index < len(self.tokens):
            token, pos = self.tokens[self.index]
            raise CalculatorError(f"unexpected {token!r} at position {pos}")
        return value

    def peek(self) -> str | None:
        return self.tokens[self.index][0] if self.index < len(self.tokens) else None

    def take(self) -> tuple[str, int]:
        if self.index >= len(self.tokens):
            raise CalculatorError("the expression ends too early (a number or '(' is missing)")
        self.index += 1
        return self.tokens[self.index - 1]

    def expr(self) -> _Value:
        value = self.term()
        while self.peek() in ("+", "-"):
            op, _ = self.take()
            value = _apply(op, value, self.term())
        return value

    def term(self) -> _Value:
        value = self.unary()
        while self.peek() in ("*", "/", "//", "%"):
            op, _ = self.take()
            value = _apply(op, value, self.unary())
        return value

    def unary(self) -> _Value:
        if self.peek() in ("+", "-"):
            op, _ = self.take()
            with _Nesting(self):
                inner = self.unary()
            return _apply("*", _Value(Fraction(-1 if op == "-" else 1)), inner)
        return self.power()

    def power(self) -> _Value:
        base = self.atom()
        if self.peek() == "**":
            self.take()
            with _Nesting(self):
                exponent = self.unary()
            return _power(base, exponent)
        return base

    def atom(self) -> _Value:
        token, pos = self.take()
        if token == "(":
            with _Nesting(self):
                value = self.expr()
            if self.peek() != ")":
                raise CalculatorError(f"the '(' at position {pos} is never closed")
            self.take()
            return value
        if token[0].isdigit() or token[0] == ".":
            return _Value(Fraction(token))
        raise CalculatorError(f"expected a number or '(' at position {pos}, found {token!r}")


class _Nesting:
    def __init__(self, parser: _Parser) -> None:
        self.parser = parser

    def __enter__(self) -> None:
        self.parser.depth += 1
        if self.parser.depth > MAX_NESTING_DEPTH:
            raise CalculatorError(f"the expression nests deeper than {MAX_NESTING_DEPTH} levels")

    def __exit__(self, *exc: object) -> None:
        self.parser.depth -= 1


_OPS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
}


def _apply(op: str, left: _Value, right: _Value) -> _Value:
    if right.number() == 0 and op in ("/", "//", "%"):
        raise CalculatorError("division by zero")
    if left.exact is None or right.exact is None:
        try:
            return _Value(None, _finite(_OPS[op](float(left.number()), float(right.number()))))
        except OverflowError:
            raise CalculatorError(_APPROX_RANGE) from None
    return _Value(_bounded(Fraction(_OPS[op](left.exact, right.exact))))


def _power(base: _Value, exponent: _Value) -> _Value:
    b, e = base.number(), exponent.number()
    if not -MAX_EXPONENT <= e <= MAX_EXPONENT:
        raise CalculatorError(f"the exponent {_short(e)} is too large (at most {MAX_EXPONENT})")
    if isinstance(b, Fraction) and isinstance(e, Fraction) and e.denominator == 1:
        if b == 0 and e < 0:
            raise CalculatorError("division by zero (0 to a negative power)")
        size = max(math.log2(abs(b.numerator) or 1), math.log2(b.denominator))
        if size * abs(e) > MAX_RESULT_BITS + 1:
            raise CalculatorError(_TOO_LARGE)
        return _Value(_bounded(b ** int(e)))
    if b < 0:
        raise CalculatorError("a negative number to a fractional power is not a real number")
    try:
        return _Value(None, _finite(float(b) ** float(e)))
    except OverflowError:
        raise CalculatorError(_APPROX_RANGE) from None


def _bounded(value: Fraction) -> Fraction:
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_RESULT_BITS:
        raise CalculatorError(_TOO_LARGE)
    return value


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise CalculatorError(_APPROX_RANGE)
    return value


def _short(value: Fraction | float) -> str:
    text = str(value)
    return text if len(text) <= 20 else text[:17] + "..."


def format_value(value: Fraction | float) -> str:
    """An integer as digits; a terminating fraction as an exact decimal; any other fraction as
    `p/q ≈ decimal`; an approximate (float) result as `≈ decimal`."""
    if isinstance(value, float):
        return f"≈ {value:.15g}"
    if value.denominator == 1:
        return str(value.numerator)
    rest = value.denominator // 2 ** _multiplicity(value.denominator, 2)
    if rest // 5 ** _multiplicity(rest, 5) == 1:
        return _exact_decimal(value)
    return f"{value.numerator}/{value.denominator} ≈ {float(value):.12g}"


def _exact_decimal(value: Fraction) -> str:
    # A denominator 2**a * 5**b divides 10**max(a, b): that many decimal places are exact.
    places = max(_multiplicity(value.denominator, 2), _multiplicity(value.denominator, 5))
    scaled = abs(value.numerator) * 10**places // value.denominator
    digits = str(scaled).rjust(places + 1, "0")
    sign = "-" if value < 0 else ""
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def _multiplicity(number: int, prime: int) -> int:
    count = 0
    while number % prime == 0:
        number //= prime
        count += 1
    return count


@tool("calculator")
def calculator(
    expression: Annotated[
        str, "Arithmetic to evaluate, e.g. '4821 * 937' or '(2.5 + 3) / 7'. No variables."
    ],
) -> str:
    """Evaluate an arithmetic expression exactly: + - * / // % ** and parentheses."""
    return format_value(evaluate(expression))
