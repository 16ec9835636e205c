"""Prompt limits: truncation keeps the prompt's end (generation prompt included) or refuses, and
responses are clamped to model.max_model_len."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.engines.models import ModelSpec, load_model
from rft.engines.prompt_limits import PromptLimits, PromptTooLongError, generation_prompt_len
from rft.engines.rollout import HFRolloutEngine, SamplingParams


@given(
    prompt=st.lists(st.integers(0, 1000), min_size=1, max_size=60),
    limit=st.integers(1, 40),
    protected=st.integers(0, 40),
)
def test_fit_keeps_the_last_tokens_or_refuses(prompt, limit, protected) -> None:
    limits = PromptLimits(max_prompt_tokens=limit, max_model_len=limit + 8)
    if len(prompt) <= limit:
        assert limits.fit(prompt, protected) == prompt
    elif protected > limit:
        with pytest.raises(PromptTooLongError, match="cannot be truncated"):
            limits.fit(prompt, protected)
    else:
        kept = limits.fit(prompt, protected)
        assert kept == prompt[-limit:]
    off = PromptLimits(max_prompt_tokens=limit, max_model_len=limit + 8, truncate=False)
    if len(prompt) > limit:
        with pytest.raises(PromptTooLongError, match=f"prompt is {len(prompt)} tokens"):
            off.fit(prompt, 0)


def test_response_is_clamped_to_the_model_length() -> None:
    limits = PromptLimits(max_prompt_tokens=10, max_model_len=16)
    params = SamplingParams(max_tokens=12, min_tokens=9)
    assert limits.response_params(4, params) is params
    clamped = limits.response_params(10, params)
    assert (clamped.max_tokens, clamped.min_tokens) == (6, 6)
    assert (clamped.temperature, clamped.n) == (params.temperature, params.n)
    with pytest.raises(PromptTooLongError, match="no room for a response"):
        PromptLimits(max_prompt_tokens=16, max_model_len=16).response_params(16, params)


def test_generation_prompt_len_of_chatml_and_of_a_template_without_one() -> None:
    model, tok = load_model(ModelSpec("tiny", seed=0))
    engine = HFRolloutEngine(model, tok)
    chat = [{"role": "user", "content": "hello"}]
    tail = len(tok.encode("<|im_start|>assistant\n", add_special_tokens=False))
    assert generation_prompt_len(engine, chat, None) == tail
    assert generation_prompt_len(engine, chat, "{{ messages[0].content }}") == 0


@given(st.integers(1, 40), st.integers(1, 40), st.integers(2, 60), st.integers(1, 30))
def test_a_turn_is_refused_over_either_limit_and_its_reply_clamped(
    prompt_len: int, max_prompt: int, model_len: int, max_tokens: int
) -> None:
    """A multi-turn turn's prompt (the conversation so far) is never truncated: over
    max_prompt_tokens, or with no room within max_model_len, it is refused; otherwise its reply
    is clamped so that the turn fits max_model_len."""
    limits = PromptLimits(max_prompt_tokens=max_prompt, max_model_len=model_len, truncate=True)
    params = SamplingParams(max_tokens=max_tokens)
    if prompt_len > max_prompt:
        with pytest.raises(PromptTooLongError, match="over model.max_prompt_tokens"):
            limits.turn_params(prompt_len, params)
    elif prompt_len >= model_len:
        with pytest.raises(PromptTooLongError, match="no room"):
            limits.turn_params(prompt_len, params)
    else:
        got = limits.turn_params(prompt_len, params)
        assert got.max_tokens == min(max_tokens, model_len - prompt_len)
