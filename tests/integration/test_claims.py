"""Claims against the real broker, on both clients: a producer fenced by another process's claim
knows it was taken over; one fenced while the newest claim of its id is still its own (what the
broker does on its own when it aborts a transaction left open through an outage) replaces its
producer, claims the id again and commits."""

from __future__ import annotations

import dataclasses

import pytest

from rft.config.connections import KafkaSettings, StackSettings
from rft.errors import FencedError
from rft.events.claims import Claims
from rft.events.models import Metric
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter

pytestmark = pytest.mark.integration


@pytest.fixture(params=["confluent", "kafka-python"])
def kafka(request: pytest.FixtureRequest, stack: StackSettings) -> KafkaSettings:
    return dataclasses.replace(stack.kafka, client=request.param)


def test_a_takeover_is_told_from_a_fence_the_broker_made(kafka: KafkaSettings, unique: str) -> None:
    control, data = f"{unique}.control", f"{unique}.data"
    ensure_topics(kafka, [control, data])
    holder = f"{unique}.trainer"
    mine = Claims(kafka, control, holder)
    with EventWriter.open(kafka, transactional_id=holder) as first:
        mine.claim(first)
        assert mine.newest() is not None and mine.newest().token == mine.token
        # the same process's claim through a second producer bumps the epoch, as the broker does
        # when it aborts a timed-out transaction: the first producer is fenced, yet no other
        # process claimed the id
        with EventWriter.open(kafka, transactional_id=holder) as bump:
            mine.claim(bump)
        with pytest.raises(FencedError):
            first.begin()
            first.send(data, Metric(component="c", run=unique, step=1, values={}))
            first.commit()
        assert not mine.taken_over(grace_s=0.0)
        mine.reclaim(first)
        first.begin()
        first.send(data, Metric(component="c", run=unique, step=2, values={}))
        first.commit()  # the replaced producer holds the id again
        # another process claims the id: now it is a takeover
        theirs = Claims(kafka, control, holder)
        with EventWriter.open(kafka, transactional_id=holder) as other:
            theirs.claim(other)
        with pytest.raises(FencedError):
            mine.claim(first)
        assert mine.taken_over(grace_s=0.0)
        assert theirs.newest() is not None and theirs.newest().token == theirs.token
