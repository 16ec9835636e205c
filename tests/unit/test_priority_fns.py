"""Replay priorities (`replay_buffer.priority_fn`, `priority_fn_args`): float64 reference values
written from Trinity-RFT's definitions, and the properties the replay buffer relies on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.buffer.priority_fns import PRIORITY_FNS
from rft.buffer.replay_buffer import replay_noise
from rft.errors import ConfigError

versions = st.integers(0, 10_000)
uses = st.integers(0, 50)
noises = st.floats(-6, 6, allow_nan=False)
decays = st.floats(0, 10, allow_nan=False)


def test_linear_decay_matches_float64_reference() -> None:
    fn = PRIORITY_FNS.get("linear_decay")
    rng = np.random.default_rng(0)
    mv = rng.integers(0, 500, 64)
    uc = rng.integers(0, 9, 64)
    decay = 0.37
    want = mv.astype(np.float64) - np.float64(decay) * uc.astype(np.float64)
    got = np.array([fn(int(v), int(u), 0.0, decay=decay)[0] for v, u in zip(mv, uc, strict=True)])
    np.testing.assert_array_equal(got, want)
    assert all(fn(int(v), int(u), 1.0)[1] for v, u in zip(mv, uc, strict=True))  # always kept
    assert fn(3, 1, 0.0) == (1.0, True)  # default decay 2.0, as in Trinity-RFT


def test_randomized_use_count_control_matches_float64_reference() -> None:
    fn = PRIORITY_FNS.get("linear_decay_use_count_control_randomization")
    rng = np.random.default_rng(1)
    mv, uc, z = rng.integers(0, 500, 64), rng.integers(0, 6, 64), rng.standard_normal(64)
    decay, sigma, limit = 1.2, 0.3, 3
    want = mv - decay * uc + sigma * z  # float64 throughout
    out = [
        fn(int(v), int(u), float(n), decay=decay, use_count_limit=limit, sigma=sigma)
        for v, u, n in zip(mv, uc, z, strict=True)
    ]
    np.testing.assert_allclose([p for p, _ in out], want, rtol=0, atol=1e-12)
    np.testing.assert_array_equal([k for _, k in out], uc < limit)
    # Trinity's worked example: decay 1.2, limit 2, sigma 0 -> version 4 used twice is let go
    assert fn(4, 2, 5.0, decay=1.2, use_count_limit=2, sigma=0.0) == pytest.approx((1.6, False))
    assert fn(3, 1, 5.0, decay=1.2, use_count_limit=2, sigma=0.0) == pytest.approx((1.8, True))
    assert PRIORITY_FNS.get("decay_limit_randomization") is fn


@given(versions, uses, noises, decays)
def test_each_use_lowers_the_priority_by_decay(v: int, u: int, z: float, decay: float) -> None:
    for name in PRIORITY_FNS.names():
        fn = PRIORITY_FNS.get(name)
        now, _ = fn(v, u, z, decay=decay)
        later, _ = fn(v, u + 1, z, decay=decay)
        assert later == pytest.approx(now - decay, abs=1e-9)
        newer, _ = fn(v + 1, u, z, decay=decay)
        assert newer == pytest.approx(now + 1, abs=1e-9)


@given(versions, uses, noises, st.integers(-2, 8))
def test_use_count_limit_decides_reuse(v: int, u: int, z: float, limit: int) -> None:
    fn = PRIORITY_FNS.get("linear_decay_use_count_control_randomization")
    _, keep = fn(v, u, z, use_count_limit=limit)
    assert keep == (u < limit or limit <= 0)
    # without noise the draw does not matter; with it, it shifts by exactly sigma * z
    assert fn(v, u, z)[0] == fn(v, u, -z)[0]
    assert fn(v, u, z, sigma=0.5)[0] - fn(v, u, 0.0, sigma=0.5)[0] == pytest.approx(0.5 * z)


def test_negative_sigma_is_refused() -> None:
    with pytest.raises(ConfigError, match="sigma"):
        PRIORITY_FNS.get("linear_decay_use_count_control_randomization")(0, 0, 0.0, sigma=-1.0)


def test_noise_is_the_same_after_a_restart_and_standard_normal() -> None:
    assert replay_noise("task-7", 2) == replay_noise("task-7", 2)
    assert replay_noise("task-7", 2) != replay_noise("task-7", 3)
    draws = np.array([replay_noise(f"g{i}", u) for i in range(2000) for u in range(2)])
    assert abs(draws.mean()) < 0.1 and abs(draws.std() - 1) < 0.1
