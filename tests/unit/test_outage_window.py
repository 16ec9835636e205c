"""The outage window's policy on a simulated clock: one line when an outage opens and one when it
closes (however many attempts and clients fail in between), retries only what the caller calls
retriable, with backoff, and OutageError naming service, address and key past the limit."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.errors import OutageError
from rft.stack.outage_window import (
    BACKOFF_MAX_S,
    FLAP_GRACE_S,
    OutageWindow,
    backoff_s,
    forget_outages,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture(autouse=True)
def fresh_states() -> Iterator[None]:
    forget_outages()
    yield
    forget_outages()


def window(clock: FakeClock, timeout_s: float = 60.0, address: str = "10.0.0.1:9092"):
    return OutageWindow(
        "kafka",
        address,
        timeout_s,
        "stack.kafka.outage_timeout",
        clock=clock,
        wall_clock=lambda: 0.0,
        sleep=clock.sleep,
    )


def outage_lines(caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    messages = [r.getMessage() for r in caplog.records if r.name == "rft.stack.outage_window"]
    return (
        [m for m in messages if "unreachable since" in m],
        [m for m in messages if "reachable again" in m],
    )


def test_one_line_when_an_outage_opens_and_one_when_it_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock = FakeClock()
    a, b = window(clock), window(clock)  # two clients of one process, one broker
    for _ in range(20):
        a.failed("connection refused")
        b.failed("connection refused")
        clock.now += 1.0
    assert a.down and b.down
    b.succeeded()
    a.succeeded()
    opened, closed = outage_lines(caplog)
    assert len(opened) == 1 and len(closed) == 1
    assert "kafka at 10.0.0.1:9092 unreachable since" in opened[0]
    assert "retrying for up to 60 s (stack.kafka.outage_timeout)" in opened[0]
    assert "after 20 s" in closed[0]
    assert not a.down


def test_another_address_is_another_outage(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    clock = FakeClock()
    window(clock, address="h1:1").failed("x")
    window(clock, address="h2:2").failed("x")
    opened, _ = outage_lines(caplog)
    assert len(opened) == 2


def test_a_failure_right_after_recovery_continues_the_outage_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock = FakeClock()
    w = window(clock)
    w.failed("down")
    clock.now += 5
    w.succeeded()
    clock.now += FLAP_GRACE_S / 2
    w.failed("coordinator not ready")
    clock.now += 1
    w.succeeded()
    opened, closed = outage_lines(caplog)
    assert (len(opened), len(closed)) == (1, 1)
    clock.now += FLAP_GRACE_S * 2
    w.failed("down again")
    opened, _ = outage_lines(caplog)
    assert len(opened) == 2  # a later failure is a new outage


def test_past_the_limit_the_error_names_service_address_and_key() -> None:
    clock = FakeClock()
    w = window(clock, timeout_s=30.0)
    w.failed("refused")
    clock.now += 29.0
    w.failed("refused")  # still inside
    clock.now += 1.0
    with pytest.raises(OutageError) as caught:
        w.failed("refused")
    text = str(caught.value)
    assert "kafka at 10.0.0.1:9092" in text
    assert "stack.kafka.outage_timeout = 30 s" in text and "refused" in text


def test_call_retries_retriable_failures_with_backoff_then_returns() -> None:
    clock = FakeClock()
    w = window(clock)
    outcomes: list[Exception | str] = [TimeoutError("t1"), TimeoutError("t2"), "done"]

    def attempt() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert w.call("flush", attempt, lambda e: isinstance(e, TimeoutError)) == "done"
    assert clock.slept == [backoff_s(0), backoff_s(1)]
    assert not w.down


def test_call_raises_a_failure_that_is_not_retriable_at_once() -> None:
    clock = FakeClock()
    w = window(clock)
    calls = 0

    def attempt() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("delivery failed: record too large")

    with pytest.raises(ValueError):
        w.call("flush", attempt, lambda e: isinstance(e, TimeoutError))
    assert calls == 1 and clock.slept == [] and not w.down


def test_call_gives_up_with_outage_error_when_the_window_is_spent() -> None:
    clock = FakeClock()
    w = window(clock, timeout_s=20.0)

    def attempt() -> None:
        clock.now += 2.0  # each attempt blocks a while, as a client's own timeout does
        raise TimeoutError("no answer")

    with pytest.raises(OutageError, match="no answer"):
        w.call("commit transaction", attempt, lambda e: isinstance(e, TimeoutError))
    assert 20.0 <= w.down_for() < 20.0 + 2.0 + BACKOFF_MAX_S


def test_a_call_failing_while_other_clients_succeed_is_bounded_by_its_own_time() -> None:
    """Another client's success closes the process's outage after each failure, so the window
    alone would let this call retry for ever; its own failing time ends it at the limit."""
    clock = FakeClock()
    stuck, healthy = window(clock, timeout_s=20.0), window(clock, timeout_s=20.0)
    attempts = 0

    def attempt() -> None:
        nonlocal attempts
        attempts += 1
        if attempts > 1000:
            raise RuntimeError("still retrying after 1000 attempts")
        clock.now += 1.0
        healthy.succeeded()  # e.g. a consumer of the same broker polling fine meanwhile
        raise TimeoutError("begin transaction: invalid state")

    with pytest.raises(OutageError, match="while other calls of this process succeeded") as info:
        stuck.call("begin transaction", attempt, lambda e: isinstance(e, TimeoutError))
    assert str(info.value).startswith("kafka at 10.0.0.1:9092 unreachable for begin transaction")
    assert "invalid state" in str(info.value) and "stack.kafka.outage_timeout = 20 s" in str(
        info.value
    )
    assert attempts < 1000


@given(st.integers(min_value=0, max_value=10_000))
def test_backoff_grows_and_is_capped(attempt: int) -> None:
    assert 0 < backoff_s(attempt) <= BACKOFF_MAX_S
    assert backoff_s(attempt) <= backoff_s(attempt + 1)


def test_outage_timeout_is_loaded_and_must_be_positive(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from rft.catalog import load_config
    from rft.errors import ConfigError
    from tests.unit.config_samples import MINIMAL

    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL + "stack:\n  kafka: {outage_timeout: 45}\n", encoding="utf-8")
    cfg = load_config(path)
    assert cfg.stack.kafka.outage_timeout == 45
    assert cfg.stack.object_store.outage_timeout == 300  # the default
    with pytest.raises(ConfigError, match="stack.object_store.outage_timeout"):
        load_config(path, ("stack.object_store.outage_timeout=0",))


def test_a_success_that_needs_no_broker_leaves_the_outage_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Beginning a transaction is the client's own bookkeeping: it succeeds in an outage, and
    must neither log the service reachable nor restart the outage's clock."""
    caplog.set_level(logging.WARNING)
    clock = FakeClock()
    w = window(clock, timeout_s=30.0)
    w.failed("flush: no answer")
    clock.now += 10.0
    w.call("begin transaction", lambda: None, lambda e: True, proves_reachable=False)
    assert w.down and w.down_for() == 10.0
    clock.now += 25.0
    with pytest.raises(OutageError, match="35 s"):
        w.failed("flush: still no answer")
    opened, closed = outage_lines(caplog)
    assert len(opened) == 1 and closed == []
