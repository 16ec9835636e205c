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


@given(
    st.sampled_from(["fixed", "trainer_driven", "fully_async", "dynamic_by_explorer"]),
    st.integers(1, 4),
    st.integers(0, 3),
    st.integers(0, 6),
    st.integers(1, 40),
)
def test_eta_bound_never_lets_a_step_run_more_than_eta_versions_ahead(
    name: str, interval: int, offset: int, eta: int, step: int
) -> None:
    """max_head_offpolicyness = η: step s needs version >= s-1-η, on top of the style's own rule;
    without η the style's rule alone."""
    if name != "dynamic_by_explorer" and eta < interval - 1:
        with pytest.raises(ConfigError, match="max_head_offpolicyness.*deadlock"):
            build_sync_style(name, interval, offset, eta)
        return
    bounded = build_sync_style(name, interval, offset, eta)
    free = build_sync_style(name, interval, offset)
    need = bounded.required_version(step)
    assert (step - 1) - need <= eta
    assert need == max(free.required_version(step), step - 1 - eta)


def test_eta_is_reachable_when_versions_come_every_interval() -> None:
    """With versions every k train steps and η >= k-1 the version a step needs exists once the
    batches before it are trained: the newest multiple of k at or below s-1 is >= s-1-η."""
    for k in range(1, 5):
        for eta in range(k - 1, k + 3):
            style = build_sync_style("fully_async", k, 0, eta)
            for s in range(1, 40):
                newest_trainable = ((s - 1) // k) * k
                assert style.required_version(s) <= newest_trainable


def test_only_fully_async_loads_between_rollouts() -> None:
    assert build_sync_style("fully_async", 1).loads_between_rollouts
    for name in ("fixed", "trainer_driven", "dynamic_by_explorer"):
        assert not build_sync_style(name, 1).loads_between_rollouts


def test_eta_below_the_publishing_interval_is_refused_at_load(tmp_path) -> None:
    from rft.catalog import load_config
    from rft.config.loader import ConfigValidationError

    path = tmp_path / "run.yaml"
    path.write_text(
        "project: p\nname: n\nmode: train\nmodel: {model_path: tiny}\nbuffer: {batch_size: 2}\n"
        "synchronizer:\n  sync_style: fully_async\n  sync_interval: 4\n"
        "  max_head_offpolicyness: 1\n"
    )
    with pytest.raises(ConfigValidationError) as err:
        load_config(path)
    assert "`synchronizer.max_head_offpolicyness` 1 is less than sync_interval - 1 = 3" in str(
        err.value
    )
