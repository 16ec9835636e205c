"""A tiny, safe parser and evaluator for arithmetic written by a model (never Python `eval`).

Grammar: integers, `+ - * /`, parentheses and spaces; unary signs only when allowed. Values are
exact `Fraction`s, so 6/4*2 is 3 with no rounding. Input length and nesting depth are bounded so a
hostile reply cannot exhaust memory or the stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

MAX_EXPRESSION_CHARS = 256
MAX_NESTING_DEPTH = 32

_TOKEN = re.compile(r"\s*(?:([0-9]+)|([-+*/()]))")


class ExpressionError(ValueError):
    """The text is not a well-formed arithmetic expression, or cannot be evaluated."""


@dataclass(frozen=True)
class ParsedExpression:
    """An evaluated expression and the integer literals it used, in order of appearance."""

    value: Fraction
    literals: tuple[int, ...]


def tokenize(text: str) -> list[str]:
    """Split `text` into number and operator tokens; any other character is an error."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    tokens: list[str] = []
    pos = 0
    stripped_end = len(text.rstrip())
    while pos < stripped_end:
        match = _TOKEN.match(text, pos)
        if match is None:
            bad = text[pos:].lstrip()[:1]
            raise ExpressionError(f"character {bad!r} is not allowed at position {pos}")
        tokens.append(match.group(1) or match.group(2))
        pos = match.end()
    if not tokens:
        raise ExpressionError("empty expression")
    return tokens


class _Parser:
    """Recursive descent over: expr := term (('+'|'-') term)*; term := factor (('*'|'/') factor)*;
    factor := NUMBER | '(' expr ')' | ('+'|'-') factor (when unary signs are allowed)."""

    def __init__(self, tokens: list[str], allow_unary: bool) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0
        self.allow_unary = allow_unary
        self.literals: list[int] = []

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ExpressionError("expression ends too early")
        self.pos += 1
        return token

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.factor()
            if op == "*":
                value = value * rhs
            elif rhs == 0:
                raise ExpressionError("division by zero")
            else:
                value = value / rhs
        return value

    def factor(self) -> Fraction:
        token = self.take()
        if token.isdigit():
            self.literals.append(int(token))
            return Fraction(int(token))
        if token == "(":
            self.depth += 1
            if self.depth > MAX_NESTING_DEPTH:
                raise ExpressionError(f"parentheses nested deeper than {MAX_NESTING_DEPTH}")
            value = self.expr()
            if self.take() != ")":
                raise ExpressionError("missing ')'")
            self.depth -= 1
            return value
        if token in ("+", "-") and self.allow_unary:
            self.depth += 1  # chained signs recurse too
            if self.depth > MAX_NESTING_DEPTH:
                raise ExpressionError(f"signs chained deeper than {MAX_NESTING_DEPTH}")
            value = self.factor()
            self.depth -= 1
            return -value if token == "-" else value
        raise ExpressionError(f"unexpected {token!r} at token {self.pos}")


def parse_expression(text: str, *, allow_unary: bool = False) -> ParsedExpression:
    """Parse and evaluate `text` exactly; raise ExpressionError on anything else."""
    parser = _Parser(tokenize(text), allow_unary)
    value = parser.expr()
    if parser.peek() is not None:
        raise ExpressionError(f"unexpected {parser.peek()!r} at token {parser.pos}")
    return ParsedExpression(value=value, literals=tuple(parser.literals))
