"""Dead letters across partitions and inside transactions: every poison record is parked exactly
where it was read, its offset is committed with the rest, and nothing good is skipped."""

from __future__ import annotations

import dataclasses
import time

import pytest

from rft.config.connections import KafkaSettings
from rft.events.models import DeadLetter, Metric
from rft.events.reader import Envelope, EventReader
from rft.events.transport import TopicSpec, kafka_backend
from rft.events.writer import EventWriter

pytestmark = pytest.mark.integration


@pytest.fixture(params=["confluent", "kafka-python"])
def kafka(request: pytest.FixtureRequest, stack) -> KafkaSettings:
    return dataclasses.replace(stack.kafka, client=request.param)


def topics(kafka: KafkaSettings, *names: str, partitions: int = 1) -> None:
    with kafka_backend(kafka).admin() as admin:
        admin.create_topics([TopicSpec(n, partitions, 1) for n in names])


def drain(reader: EventReader, enough, timeout_s: float = 60.0) -> list[Envelope]:
    got: list[Envelope] = []
    deadline = time.monotonic() + timeout_s
    while not enough(got):
        assert time.monotonic() < deadline, f"gave up with {len(got)} events"
        got += reader.poll(200, 0.5)
    return got


def quiet(reader: EventReader, seconds: float = 3.0) -> list[Envelope]:
    got: list[Envelope] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got += reader.poll(200, 0.5)
    return got


def publish_with_poison(kafka: KafkaSettings, topic: str, count: int) -> set[bytes]:
    """`count` records over 4 keys, every fifth one corrupt; returns the corrupt payloads."""
    poison = set()
    with EventWriter.open(kafka) as writer:
        for i in range(count):
            key = f"k{i % 4}"
            if i % 5 == 4:
                payload = f"poison-{i}".encode()
                poison.add(payload)
                writer.send_raw(topic, payload, key=key.encode())
            else:
                writer.send(topic, Metric(component="c", run="r", step=i, values={}), key=key)
    return poison


def test_poison_across_partitions_is_parked_once_and_never_reread(
    kafka: KafkaSettings, unique: str
) -> None:
    source, dead = f"{unique}.src", f"{unique}.dead-letter"
    topics(kafka, source, partitions=4)
    topics(kafka, dead)
    poison = publish_with_poison(kafka, source, 40)
    group = f"g-{unique}"
    with EventReader.open(kafka, group, [source], dead_letter_topic=dead) as reader:
        got = drain(reader, lambda got: len(got) == 32 and reader.parked_count == 8)
        committed = reader.commit()
    assert sorted(e.event.step for e in got) == [i for i in range(40) if i % 5 != 4]
    # each partition's commit covers everything read from it, parked records included
    assert sum(o.offset for o in committed) == 40
    with EventReader.open(kafka, f"ops-{unique}", [dead]) as ops:
        letters = [e.event for e in drain(ops, lambda got: len(got) >= 8)]
        letters += [e.event for e in quiet(ops, 2.0)]
    assert all(isinstance(d, DeadLetter) for d in letters)
    assert {d.payload for d in letters} == poison  # all parked, none twice
    assert len(letters) == 8
    places = {(d.source_partition, d.source_offset) for d in letters}
    assert len(places) == 8
    with EventReader.open(kafka, group, [source], dead_letter_topic=dead) as reader:
        assert quiet(reader) == []
        assert reader.parked_count == 0


def test_transaction_commits_parked_offsets_with_the_batch(
    kafka: KafkaSettings, unique: str
) -> None:
    source, sink, dead = f"{unique}.src", f"{unique}.out", f"{unique}.dead-letter"
    topics(kafka, source, sink, dead)
    publish_with_poison(kafka, source, 10)  # offsets 4 and 9 are poison
    group = f"g-{unique}"
    with (
        EventReader.open(kafka, group, [source], dead_letter_topic=dead) as reader,
        EventWriter.open(kafka, transactional_id=f"tx-{unique}") as writer,
    ):
        got = drain(reader, lambda got: len(got) == 8 and reader.parked_count == 2)
        writer.begin()
        for e in got:
            writer.send(sink, e.event)
        writer.send_offsets(reader, got)
        writer.commit()
    with EventReader.open(kafka, group, [source], dead_letter_topic=dead) as reader:
        assert quiet(reader) == []
        assert reader.parked_count == 0
