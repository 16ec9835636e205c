"""`rft gc`'s TTL parsing: the units it takes, and a located error for anything else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.errors import ConfigError
from rft.storage.checkpoint_gc import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("90", 90.0),
        ("90s", 90.0),
        ("30m", 1800.0),
        ("24h", 86400.0),
        ("7d", 604800.0),
        ("1.5h", 5400.0),
        (" 2 m ", 120.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["", "s", "m", "h", "d"]))
def test_every_unit_scales_its_number(number: int, unit: str) -> None:
    scale = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    assert parse_duration(f"{number}{unit}") == number * scale


@pytest.mark.parametrize("text", ["", "h", "-1h", "1w", "1h30m", "soon", "1e3"])
def test_anything_else_names_the_flag_and_the_text(text: str) -> None:
    with pytest.raises(ConfigError, match=f"--ttl {text!r}"):
        parse_duration(text)
