"""Hypothesis strategies for events, shared by the codec test suites."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from rft.events.models import Experience

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
# unicode across all planes (no lone surrogates: they are not UTF-8 and models reject nothing
# about them, so they are covered separately as an encode fallback)
text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)
# Experience equality compares these with ==; NaN bit patterns come through packed_array
floats = st.floats(allow_nan=False, width=64)
# what a logprob temperature may be: finite and > 0, from tiny to huge and the usual 0.x - 2.0
temperatures = st.floats(min_value=0.0, exclude_min=True, allow_infinity=False) | st.sampled_from(
    [0.7, 1.0, 1.3]
)


def packed_array(draw: st.DrawFn, n: int, dtype: str) -> np.ndarray:
    """`n` values of `dtype` from raw bytes: any bit pattern, NaN payloads included."""
    size = n * np.dtype(dtype).itemsize
    return np.frombuffer(draw(st.binary(min_size=size, max_size=size)), dtype=dtype).copy()


@st.composite
def experiences(draw: st.DrawFn) -> Experience:
    # 0 (empty bytes), small, and sizes whose length prefixes cross the 1- and 2-byte varint tables
    n = draw(st.integers(0, 40) | st.sampled_from([0, 16, 2047, 2048, 4096]))
    has_token_rewards = draw(st.booleans())
    turn_count = draw(st.integers(1, 2**31 - 1) | st.just(1))
    return Experience(
        experience_id=draw(text),
        task_id=draw(text),
        group_id=draw(text | st.text(max_size=9000)),
        group_size=draw(i32),
        explorer_id=draw(text),
        model_version=draw(i64 | st.integers(-70, 70)),
        prompt_ids=packed_array(draw, draw(st.integers(0, 64)), "<i4"),
        response_ids=packed_array(draw, n, "<i4"),
        logprobs=packed_array(draw, n, "<f4"),
        action_mask=np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool),
        reward=draw(floats),
        token_rewards=packed_array(draw, n, "<f4") if has_token_rewards else None,
        prompt_text=draw(text),
        response_text=draw(st.text(max_size=300)),
        info=draw(st.dictionaries(text, text, max_size=70)),
        truncated=draw(st.booleans()),
        metrics=draw(st.dictionaries(text, floats, max_size=5)),
        logprob_temperature=draw(temperatures),
        explorer_group=draw(text),
        trajectory_id=draw(text.filter(bool)) if turn_count > 1 else draw(text),
        turn=draw(st.integers(0, turn_count - 1)),
        turn_count=turn_count,
        created_at=draw(i64 | st.just(1_767_225_600_000)),
    )
