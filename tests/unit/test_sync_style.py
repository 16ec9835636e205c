"""Sync styles: which version each explorer step needs, and when the trainer publishes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.errors import ConfigError
from rft.synchronizer import build_sync_style


@given(st.integers(1, 5), st.integers(0, 4), st.integers(1, 60))
def test_fixed_required_version_is_newest_allowed(interval: int, offset: int, step: int) -> None:
    """Step s may lag the trainer by `offset` steps: it needs the newest published version
    (a multiple of `interval`) among those trained on steps up to s-1-offset."""
    style = build_sync_style("fixed", interval, offset)
    need = style.required_version(step)
    allowed = [v for v in range(0, step) if v % interval == 0 and v <= max(0, step - 1 - offset)]
    assert need == max(allowed)
    # staleness is bounded by offset + interval - 1
    assert (step - 1) - need <= offset + interval - 1


def test_fixed_on_policy_waits_for_previous_step() -> None:
    style = build_sync_style("fixed", 1, 0)
    assert [style.required_version(s) for s in (1, 2, 3, 4)] == [0, 1, 2, 3]
    assert all(style.should_publish(t) for t in range(1, 6))


def test_explorer_driven_alias_and_requests() -> None:
    a = build_sync_style("explorer_driven", 3)
    b = build_sync_style("dynamic_by_explorer", 3)
    assert type(a) is type(b)
    assert [s for s in range(1, 11) if b.should_request(s)] == [4, 7, 10]
    assert not any(b.should_publish(t) for t in range(1, 10))
    assert b.publishes_on_request


def test_trainer_driven_publishes_every_interval_without_blocking() -> None:
    style = build_sync_style("trainer_driven", 2)
    assert [t for t in range(1, 9) if style.should_publish(t)] == [2, 4, 6, 8]
    assert all(style.required_version(s) == 0 for s in range(1, 9))


def test_unknown_style_names_key_and_suggests() -> None:
    with pytest.raises(ConfigError, match="sync_style.*'fixed'"):
        build_sync_style("fixd", 1)
