"""RangeReader's order against the real broker: two reads of one multi-partition range, in any
batch sizes and with either client, deliver the same events in the same order (by index in the
span, topic and partition), a read resumed from saved offsets goes on in that order, and
partitions paused to bound memory change nothing."""

from __future__ import annotations

import dataclasses
import time

import pytest

from rft.config.connections import KafkaSettings, StackSettings
from rft.consumers.replay import topic_range
from rft.consumers.replay.topic_range import RangeReader
from rft.events.models import Metric
from rft.events.reader import Envelope
from rft.events.transport import TopicSpec, kafka_backend
from rft.events.writer import EventWriter

pytestmark = pytest.mark.integration

PARTITIONS = 4
EVENTS = 120


@pytest.fixture(params=["confluent", "kafka-python"])
def kafka(request: pytest.FixtureRequest, stack: StackSettings) -> KafkaSettings:
    return dataclasses.replace(stack.kafka, client=request.param)


@pytest.fixture
def topic(stack: StackSettings, unique: str) -> str:
    """Metrics keyed over four partitions, written as explorers write: a transaction per few
    events (a marker after each), some aborted, and one undecodable record."""
    name = f"t.{unique}.order"
    with kafka_backend(stack.kafka).admin() as admin:
        admin.create_topics([TopicSpec(name, PARTITIONS, 1)])
    with EventWriter.open(stack.kafka, transactional_id=f"tx-{unique}") as writer:
        for first in range(0, EVENTS, 6):
            writer.begin()
            for step in range(first, first + 6):
                writer.send(name, metric(step), key=f"k{step % 7}")
            writer.commit()
            if first % 24 == 0:
                writer.begin()
                writer.send(name, metric(-1), key="k3")  # never visible
                writer.abort()
    with EventWriter.open(stack.kafka) as plain:
        plain.send_raw(name, b"not an event", key=b"k5")
        plain.send(name, metric(EVENTS), key="k6")
    return name


def metric(step: int) -> Metric:
    return Metric(component="test", run="r", step=step, values={"x": float(step)})


def read(reader: RangeReader, max_events: int, limit: int | None = None) -> list[Envelope]:
    got: list[Envelope] = []
    while not reader.exhausted and (limit is None or len(got) < limit):
        want = max_events if limit is None else min(max_events, limit - len(got))
        got += reader.poll(want, 0.2)
    return got


def where(envs: list[Envelope]) -> list[tuple[str, int, int]]:
    return [(e.topic, e.partition, e.offset) for e in envs]


def merge_order(reader: RangeReader, envs: list[Envelope]) -> list[tuple[str, int, int]]:
    """`envs` sorted by the key the reader promises: index in span, topic, partition."""
    return where(
        sorted(
            envs,
            key=lambda e: (
                e.offset - reader.spans[(e.topic, e.partition)][0],
                e.topic,
                e.partition,
            ),
        )
    )


def test_two_reads_of_a_range_in_other_batch_sizes_deliver_one_order(
    kafka: KafkaSettings, topic: str
) -> None:
    with RangeReader.open(kafka, [topic]) as first:
        one = read(first, 7)
        spans = first.spans
        assert len(first.undecodable) == 1
    with RangeReader.for_spans(kafka, spans) as second:
        two = read(second, 500)
        assert second.undecodable == first.undecodable
    assert len(one) == EVENTS + 1
    assert len({(e.topic, e.partition) for e in one}) == PARTITIONS
    assert where(one) == where(two) == merge_order(first, one)
    assert sorted(e.event.step for e in one) == list(range(EVENTS + 1))


def test_a_read_resumed_from_saved_offsets_goes_on_in_the_same_order(
    kafka: KafkaSettings, topic: str
) -> None:
    with RangeReader.open(kafka, [topic]) as whole:
        full = read(whole, 50)
        spans = whole.spans
    for cut in (0, 17, 64, len(full)):
        saved = {tp: first for tp, (first, _) in spans.items()}
        with RangeReader.for_spans(kafka, spans) as before:
            head = read(before, 5, limit=cut)
        for e in head:
            saved[(e.topic, e.partition)] = e.offset + 1
        with RangeReader.for_spans(kafka, spans) as after:
            for (t, p), offset in saved.items():
                after.seek(t, p, offset)
            rest = read(after, 500)
        assert where(head) == where(full[:cut])
        assert where(rest) == where(full[cut:])


def test_partitions_paused_to_bound_memory_change_nothing(
    kafka: KafkaSettings, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with RangeReader.open(kafka, [topic]) as plain:
        expected = where(read(plain, 500))
        spans = plain.spans
    # every partition holding one undelivered record is paused until it holds none
    monkeypatch.setattr(topic_range, "PAUSE_BYTES", 1)
    monkeypatch.setattr(topic_range, "RESUME_BYTES", 1)
    with RangeReader.for_spans(kafka, spans) as paused:
        assert where(read(paused, 500)) == expected
        assert paused.done == paused.total


def test_a_read_whose_partitions_are_handed_back_goes_on_where_it_stood(
    kafka: KafkaSettings, topic: str
) -> None:
    """The reader works past its poll interval mid-read (a trainer's long step): its member
    leaves the group and the next poll joins it again, which hands every partition back. The
    group never commits, so unless the reader seeks them to where its reading stands the client
    reads them again from their oldest record; the order must not change either way, and the
    work must not be done twice."""
    with RangeReader.open(kafka, [topic]) as plain:
        expected = where(read(plain, 500))
        spans = plain.spans
    short = {
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "max.poll.interval.ms": 7000,
    }
    with RangeReader.for_spans(kafka, spans, config=short) as reader:
        head = read(reader, 5, limit=40)
        fetched = reader._fetched()
        assert fetched > len(head)  # read ahead of what it delivered
        time.sleep(10)  # past max.poll.interval.ms: the member leaves the group
        rest = read(reader, 5)
        assert where(head + rest) == expected
        # before the seek on reassignment every partition was fetched again from its start:
        # at least `fetched` records twice
        assert reader.refetched < fetched // 4, (reader.refetched, fetched)
