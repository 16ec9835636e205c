"""The calculator tool's own parser: exact values, Python's precedence, bounds, clear errors."""

from __future__ import annotations

import operator
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.tools import TOOLS
from rft.tools.calculator import (
    MAX_EXPONENT,
    MAX_EXPRESSION_CHARS,
    MAX_NESTING_DEPTH,
    MAX_RESULT_BITS,
    CalculatorError,
    evaluate,
    format_value,
)

# The oracle: Python's own Fraction arithmetic for each operator the calculator reads.
_OPS = {
    symbol: getattr(operator, name)
    for symbol, name in [
        ("+", "add"),
        ("-", "sub"),
        ("*", "mul"),
        ("/", "truediv"),
        ("//", "floordiv"),
        ("%", "mod"),
    ]
}


def numbers() -> st.SearchStrategy[tuple[str, Fraction]]:
    """Integer and decimal literals with their exact values."""
    whole = st.integers(min_value=0, max_value=10**6)
    decimal = st.tuples(whole, st.integers(min_value=0, max_value=999)).map(
        lambda p: (f"{p[0]}.{p[1]:03d}", p[0] + Fraction(p[1], 1000))
    )
    return st.one_of(whole.map(lambda n: (str(n), Fraction(n))), decimal)


def bracketed() -> st.SearchStrategy[tuple[str, Fraction | None]]:
    """Fully bracketed expressions with the value Fraction arithmetic gives (None: x/0)."""

    def join(a, op, b):
        (ta, va), (tb, vb) = a, b
        text = f"({ta} {op} {tb})"
        if va is None or vb is None or (op in ("/", "//", "%") and vb == 0):
            return text, None
        return text, Fraction(_OPS[op](va, vb))

    def negate(a):
        return f"-{a[0]}", None if a[1] is None else -a[1]

    return st.recursive(
        numbers(),
        lambda kids: st.one_of(
            st.builds(join, kids, st.sampled_from(sorted(_OPS)), kids), kids.map(negate)
        ),
        max_leaves=8,
    )


@given(bracketed())
def test_bracketed_expressions_evaluate_exactly(case):
    text, value = case
    if value is None:
        with pytest.raises(CalculatorError, match="division by zero"):
            evaluate(text)
        return
    try:
        result = evaluate(text)
    except CalculatorError as exc:
        assert "too large" in str(exc)
        assert max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_RESULT_BITS
        return
    assert result == value


@given(
    st.lists(st.integers(min_value=0, max_value=99), min_size=1, max_size=6),
    st.lists(st.sampled_from(["+", "-", "*", "//", "%", "**"]), min_size=5, max_size=5),
    st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_unbracketed_integer_expressions_follow_python_precedence(values, ops, negated):
    # Integers only, so Python's own arithmetic is the exact oracle for precedence and grouping.
    # Exponents stay below 4 and powers never chain, so the oracle itself stays small.
    parts = []
    for i, n in enumerate(values):
        if i:
            op = ops[i - 1]
            if op == "**" and parts[-2:-1] == ["**"]:
                op = "*"
            parts.append(op)
            n = n % 4 if op == "**" else n
        parts.append(f"-{n}" if negated[i] else str(n))
    text = " ".join(parts)
    try:
        expected = eval(text, {"__builtins__": {}})  # the oracle: integer literals and operators
    except ZeroDivisionError:
        with pytest.raises(CalculatorError, match="division by zero"):
            evaluate(text)
        return
    if isinstance(expected, float) or abs(expected) > 2**MAX_RESULT_BITS:
        return  # a negative power of a small int: Python gives a float, covered elsewhere
    try:
        result = evaluate(text)
    except CalculatorError as exc:
        assert "too large" in str(exc) or "exponent" in str(exc)
        return
    assert result == expected


def test_power_binds_tighter_than_unary_minus_and_groups_right():
    assert evaluate("-2**2") == -(2**2)
    assert evaluate("2**3**2") == 2 ** (3**2)
    assert evaluate("2**-2") == Fraction(1, 4)
    assert evaluate("2^10") == 2**10  # models write ^ for a power
    assert evaluate("6×7÷4") == Fraction(6 * 7, 4)


@given(st.text(max_size=80))
def test_any_text_gives_a_value_or_a_calculator_error(text):
    try:
        value = evaluate(text)
    except CalculatorError as exc:
        assert str(exc)
        return
    assert isinstance(value, Fraction | float)


def test_errors_say_where_and_why():
    with pytest.raises(CalculatorError, match=r"character 'x' at position 2 is not allowed"):
        evaluate("3 x 4")
    with pytest.raises(CalculatorError, match=r"the '\(' at position 2 is never closed"):
        evaluate("2*(3+4")
    with pytest.raises(CalculatorError, match="ends too early"):
        evaluate("2*")
    with pytest.raises(CalculatorError, match=r"unexpected '4' at position 2"):
        evaluate("3 4")
    with pytest.raises(CalculatorError, match="empty"):
        evaluate("   ")
    with pytest.raises(CalculatorError, match="character '٣' at position 0"):
        evaluate("٣ + 1")  # only ASCII digits are numbers
    with pytest.raises(CalculatorError, match="not a real number"):
        evaluate("(-8)**0.5")


def test_size_bounds_hold_before_any_big_computation():
    with pytest.raises(CalculatorError, match="exponent"):
        evaluate(f"2**{MAX_EXPONENT + 1}")
    with pytest.raises(CalculatorError, match="too large"):
        evaluate("9**9999")  # refused from the estimate, never computed
    with pytest.raises(CalculatorError, match="too large"):
        evaluate("(2**5000)*(2**5000)*(2**5000)")
    with pytest.raises(CalculatorError, match="characters"):
        evaluate("1+" * (MAX_EXPRESSION_CHARS // 2) + "1")
    depth = MAX_NESTING_DEPTH + 1
    with pytest.raises(CalculatorError, match="nests deeper"):
        evaluate("(" * depth + "1" + ")" * depth)
    with pytest.raises(CalculatorError, match="nests deeper"):
        evaluate("-" * depth + "1")


def test_fractional_power_is_the_only_approximate_result():
    value = evaluate("2**0.5")
    assert isinstance(value, float)
    assert abs(value * value - 2) < 1e-12
    assert format_value(value).startswith("≈ ")


@given(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=1, max_value=10**6),
)
def test_formatted_values_read_back_exactly(numerator, denominator):
    value = Fraction(numerator, denominator)
    text = format_value(value)
    rest = value.denominator
    for prime in (2, 5):
        while rest % prime == 0:
            rest //= prime
    if rest == 1:  # a terminating decimal is written out exactly
        assert "/" not in text
        assert Fraction(text) == value
    else:
        exact, approximate = text.split(" ≈ ")
        assert Fraction(exact) == value
        assert abs(float(approximate) - float(value)) <= 1e-9 * max(1.0, abs(float(value)))


def test_registered_tool_formats_the_exact_product():
    calculator = TOOLS.get("calculator")
    assert calculator.fn(expression="4821 * 937") == str(4821 * 937)
    assert calculator.fn(expression="1/3 + 1/6") == "0.5"
    assert calculator.parameters["required"] == ["expression"]
