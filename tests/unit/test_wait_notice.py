"""WaitNotice: a wait says what it waits on once it has lasted a few seconds, then at most every
30 s; a short wait says nothing."""

from __future__ import annotations

import logging

import pytest

from rft.producers.status_announcer import FIRST_WAIT_LINE_S, WAIT_LINE_EVERY_S, WaitNotice


def test_a_short_wait_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    notice = WaitNotice(None)
    with caplog.at_level(logging.INFO):
        assert not notice.still("weights v3")
    assert not caplog.records


def test_a_long_wait_says_what_it_waits_on_at_most_every_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    notice = WaitNotice(None)
    notice.started -= FIRST_WAIT_LINE_S + 1
    with caplog.at_level(logging.INFO):
        assert notice.still("weights v3 on p.n.weights")
        assert not notice.still("weights v3 on p.n.weights")  # said just now
        assert notice.said_at is not None
        notice.said_at -= WAIT_LINE_EVERY_S
        assert notice.still("weights v4 on p.n.weights")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("waiting ") and lines[0].endswith("for weights v3 on p.n.weights")
    assert lines[1].endswith("for weights v4 on p.n.weights")


def test_over_starts_the_next_wait_afresh() -> None:
    notice = WaitNotice(None)
    notice.started -= FIRST_WAIT_LINE_S + 1
    assert notice.still("tasks")
    notice.over()
    assert not notice.still("tasks")


def test_what_it_waits_on_is_worked_out_only_when_a_line_is_due() -> None:
    asked: list[int] = []

    def what() -> str:
        asked.append(1)
        return "a full batch"

    notice = WaitNotice(None)
    assert not notice.still(what)
    notice.started -= FIRST_WAIT_LINE_S + 1
    assert notice.still(what) and not notice.still(what)
    assert len(asked) == 1 and notice.said == "a full batch"
