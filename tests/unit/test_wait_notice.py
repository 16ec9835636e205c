"""WaitNotice: a wait says what it waits on once it has lasted a few seconds, then at most every
30 s; a short wait says nothing."""

from __future__ import annotations

import logging

import pytest

from rft.config.connections import KafkaSettings
from rft.events.models import ComponentStatus
from rft.events.writer import EventWriter
from rft.producers.status_announcer import (
    FIRST_WAIT_LINE_S,
    WAIT_LINE_EVERY_S,
    StatusAnnouncer,
    WaitNotice,
)
from rft.stack.outage_window import forget_outages


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


class Recorded(StatusAnnouncer):
    """An announcer that keeps what it would send (the sending is the transport's, tested
    against the broker)."""

    def announce(self, state: str, **kwargs: object) -> ComponentStatus:  # type: ignore[override]
        self.sent.append(state)
        return ComponentStatus("c", "i", "g", state, "", "", 0, 0, "", 0, -1)


def test_while_kafka_is_away_the_wait_line_is_logged_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Announcing a wait line rides the outage window (a trainer sat 6 min in one): during an
    outage the line is logged, not announced; once Kafka answers again, lines are announced."""
    forget_outages()
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9")  # nothing there; never contacted
    with EventWriter.open(settings) as writer:
        announcer = Recorded(writer, "p.n.control", "trainer", "t", "g", 4)
        announcer.sent = []
        notice = WaitNotice(announcer)
        notice.started -= FIRST_WAIT_LINE_S + 1
        assert writer.window is not None
        writer.window.failed("flush: no answer")
        with caplog.at_level(logging.INFO):
            assert notice.still("a full batch")
        assert announcer.sent == [] and "waiting" in caplog.records[-1].getMessage()
        writer.window.succeeded()
        notice.said_at = None
        assert notice.still("a full batch") and announcer.sent == ["waiting"]
    forget_outages()
