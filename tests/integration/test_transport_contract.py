"""The event plane's contract, run once per Kafka client backend against the real broker."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable

import numpy as np
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import get_current_span

from rft.config.connections import KafkaSettings
from rft.errors import DecodeError, FencedError, OutageError, TransportError
from rft.events.codec import EventCodec
from rft.events.models import DeadLetter, Experience, Metric
from rft.events.reader import Envelope, EventReader, Resume
from rft.events.topics import TopicNames, ensure_topics
from rft.events.transport import (
    ProducerFencedError,
    RecordConsumer,
    RecordProducer,
    TopicSpec,
    kafka_backend,
)
from rft.events.writer import EventWriter

pytestmark = pytest.mark.integration

BACKENDS = ["confluent", "kafka-python"]


@pytest.fixture(params=BACKENDS)
def kafka(request: pytest.FixtureRequest, stack) -> KafkaSettings:
    return dataclasses.replace(stack.kafka, client=request.param)


def make_topic(kafka: KafkaSettings, name: str, partitions: int = 1) -> str:
    with kafka_backend(kafka).admin() as admin:
        admin.create_topics([TopicSpec(name, partitions, 1)])
    return name


def metric(step: int, run: str = "r") -> Metric:
    return Metric(component="test", run=run, step=step, values={"x": float(step)})


def read(
    reader: EventReader,
    count: int,
    timeout_s: float = 60.0,
    until: Callable[[list[Envelope]], bool] | None = None,
) -> list[Envelope]:
    """Poll until `count` envelopes arrived (or `until` holds); fail after `timeout_s`."""
    got: list[Envelope] = []
    deadline = time.monotonic() + timeout_s
    done = until or (lambda got: len(got) >= count)
    while not done(got):
        if time.monotonic() > deadline:
            pytest.fail(f"only {len(got)} of {count} events arrived in {timeout_s}s")
        got += reader.poll(max_events=max(count - len(got), 1), timeout_s=0.5)
    return got


def read_nothing_more(reader: EventReader, seconds: float = 3.0) -> list[Envelope]:
    got: list[Envelope] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got += reader.poll(max_events=100, timeout_s=0.5)
    return got


def test_round_trip_keeps_events_keys_and_schema_header(kafka: KafkaSettings, unique: str) -> None:
    topic = make_topic(kafka, f"t.{unique}.rt", partitions=3)
    sent = [metric(i) for i in range(20)]
    experience = Experience(
        experience_id="e1",
        task_id="t1",
        group_id="g1",
        group_size=1,
        explorer_id="x",
        model_version=3,
        prompt_ids=np.arange(7, dtype=np.int32),
        response_ids=np.arange(5, dtype=np.int32),
        logprobs=np.linspace(-1, 0, 5, dtype=np.float32),
    )
    with EventWriter.open(kafka) as writer:
        for m in sent:
            writer.send(topic, m, key=f"k{m.step}")
        writer.send(topic, experience, key="t1")
    with EventReader.open(kafka, f"g-{unique}", [topic]) as reader:
        got = read(reader, 21)
    by_key = {e.key: e for e in got}
    assert set(by_key) == {f"k{i}".encode() for i in range(20)} | {b"t1"}
    for m in sent:
        assert by_key[f"k{m.step}".encode()].event == m
    assert by_key[b"t1"].event == experience
    assert by_key[b"t1"].header("rft-schema") == b"rft.events.Experience"
    assert all(e.topic == topic and e.offset >= 0 and e.timestamp_ms > 0 for e in got)


def test_one_key_stays_in_one_partition_in_order(kafka: KafkaSettings, unique: str) -> None:
    topic = make_topic(kafka, f"t.{unique}.keys", partitions=4)
    with EventWriter.open(kafka) as writer:
        for i in range(40):
            writer.send(topic, metric(i, run=f"task{i % 4}"), key=f"task{i % 4}")
    with EventReader.open(kafka, f"g-{unique}", [topic]) as reader:
        got = read(reader, 40)
    for k in range(4):
        mine = [e for e in got if e.key == f"task{k}".encode()]
        assert len({e.partition for e in mine}) == 1
        ordered = sorted(mine, key=lambda e: e.offset)
        assert [e.event.step for e in ordered] == list(range(k, 40, 4))


def test_group_resumes_after_last_commit(kafka: KafkaSettings, unique: str) -> None:
    topic = make_topic(kafka, f"t.{unique}.resume")
    with EventWriter.open(kafka) as writer:
        for i in range(10):
            writer.send(topic, metric(i))
    group = f"g-{unique}"
    with EventReader.open(kafka, group, [topic]) as reader:
        got = read(reader, 10)
        committed = reader.commit(got[:4])
    assert [(o.partition, o.offset) for o in committed] == [(0, 4)]
    with EventReader.open(kafka, group, [topic]) as reader:
        rest = read(reader, 6)
    assert [e.event.step for e in rest] == list(range(4, 10))


def test_seek_to_offset_and_to_timestamp(kafka: KafkaSettings, unique: str) -> None:
    topic = make_topic(kafka, f"t.{unique}.seek")
    with EventWriter.open(kafka) as writer:
        for i in range(5):
            writer.send(topic, metric(i))
        writer.flush()
        time.sleep(0.05)
        middle_ms = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(5, 10):
            writer.send(topic, metric(i))
    with EventReader.open(kafka, f"g-{unique}", [topic]) as reader:
        assert [e.event.step for e in read(reader, 10)] == list(range(10))
        reader.seek(topic, 0, 7)
        assert [e.event.step for e in read(reader, 3)] == [7, 8, 9]
        reader.seek_to_timestamp(middle_ms)
        assert [e.event.step for e in read(reader, 5)] == [5, 6, 7, 8, 9]
        reader.seek_to_beginning()
        assert [e.event.step for e in read(reader, 10)] == list(range(10))
    # a seek asked before the first poll applies once the partition is assigned
    with EventReader.open(kafka, f"g2-{unique}", [topic]) as reader:
        reader.seek(topic, 0, 8)
        assert [e.event.step for e in read(reader, 2)] == [8, 9]


def test_committed_transactions_are_visible_and_aborted_are_not(
    kafka: KafkaSettings, unique: str
) -> None:
    topic = make_topic(kafka, f"t.{unique}.txn")
    with EventWriter.open(kafka, transactional_id=f"tx-{unique}") as writer:
        writer.begin()
        for i in range(3):
            writer.send(topic, metric(i))
        writer.commit()
        writer.begin()
        for i in range(100, 103):
            writer.send(topic, metric(i))
        writer.abort()
        writer.begin()
        writer.send(topic, metric(3))
        writer.commit()
    with EventReader.open(kafka, f"g-{unique}", [topic]) as reader:
        got = read(reader, 4)
        got += read_nothing_more(reader)
    assert [e.event.step for e in got] == [0, 1, 2, 3]


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
    kafka: KafkaSettings, unique: str
) -> None:
    # what two explorer processes with one explorer id, or two trainers of one run, amount to
    topic = make_topic(kafka, f"t.{unique}.fence")
    first = EventWriter.open(kafka, transactional_id=f"tx-{unique}")
    first.begin()
    first.send(topic, metric(0))
    first.commit()
    first.begin()
    first.send(topic, metric(1))  # in flight when the second producer starts: it is aborted
    first.flush()
    with EventWriter.open(kafka, transactional_id=f"tx-{unique}") as second:
        second.begin()
        second.send(topic, metric(2))
        second.commit()
        # the fenced producer learns it at its next flush, before anything it sent can commit
        first.send(topic, metric(3))
        with pytest.raises(ProducerFencedError, match="fenced: another process started with"):
            first.flush()
        with pytest.raises(FencedError):
            first.commit()
    with contextlib.suppress(TransportError):
        first.close()
    with EventReader.open(kafka, f"g-{unique}", [topic]) as reader:
        got = read(reader, 2)
        got += read_nothing_more(reader)
    assert [e.event.step for e in got] == [0, 2]  # read_committed: nothing of the fenced one's


def test_transaction_commits_consumed_offsets_with_the_events_written(
    kafka: KafkaSettings, unique: str
) -> None:
    source = make_topic(kafka, f"t.{unique}.in")
    sink = make_topic(kafka, f"t.{unique}.out")
    with EventWriter.open(kafka) as writer:
        for i in range(6):
            writer.send(source, metric(i))
    group = f"explorers-{unique}"
    with (
        EventReader.open(kafka, group, [source]) as reader,
        EventWriter.open(kafka, transactional_id=f"tx-{unique}") as writer,
    ):
        batch = read(reader, 6)
        first, second = batch[:3], batch[3:]
        writer.begin()
        for e in first:
            writer.send(sink, metric(e.event.step + 1000))
        writer.send_offsets(reader, first)
        writer.commit()
        writer.begin()
        for e in second:
            writer.send(sink, metric(e.event.step + 1000))
        writer.send_offsets(reader, second)
        writer.abort()
    with EventReader.open(kafka, group, [source]) as reader:
        again = read(reader, 3)
    assert [e.event.step for e in again] == [3, 4, 5]
    with EventReader.open(kafka, f"sink-{unique}", [sink]) as reader:
        out = read(reader, 3) + read_nothing_more(reader)
    assert [e.event.step for e in out] == [1000, 1001, 1002]


def test_commit_metadata_survives_plain_and_transactional_commits(
    kafka: KafkaSettings, unique: str
) -> None:
    topic = make_topic(kafka, f"t.{unique}.meta", partitions=2)
    with EventWriter.open(kafka) as writer:
        for i in range(8):
            writer.send(topic, metric(i), key=f"k{i}")
    group = f"g-{unique}"
    with EventReader.open(kafka, group, [topic]) as reader:
        assert reader.committed() == []  # nothing committed yet, and no poll needed to ask
        got = read(reader, 8)
        reader.commit(got[:4], metadata='{"step": 1}')
    with (
        EventReader.open(kafka, group, [topic]) as reader,
        EventWriter.open(kafka, transactional_id=f"tx-{unique}") as writer,
    ):
        before = reader.committed()  # a new member, before its first poll
        assert before and {o.metadata for o in before} == {'{"step": 1}'}
        rest = read(reader, 8 - sum(o.offset for o in before))
        writer.begin()
        writer.send_offsets(reader, rest, metadata='{"step": 2}')
        writer.commit()
    with EventReader.open(kafka, group, [topic]) as reader:
        after = reader.committed()
    by_partition = {o.partition: o for o in after}
    assert sum(o.offset for o in after) == 8
    for e in rest:
        assert by_partition[e.partition].metadata == '{"step": 2}'


def test_corrupt_record_is_parked_and_reading_goes_on(kafka: KafkaSettings, unique: str) -> None:
    topic = make_topic(kafka, f"t.{unique}.poison")
    dead = make_topic(kafka, f"t.{unique}.dead-letter")
    garbage = b"\xc3\x01" + b"\xff" * 12
    with EventWriter.open(kafka) as writer:
        writer.send(topic, metric(0))
        writer.send_raw(topic, garbage, key=b"bad")
        writer.send(topic, metric(2))
        writer.send_raw(topic, b"not avro at all", key=b"worse")
    group = f"g-{unique}"
    with EventReader.open(kafka, group, [topic], dead_letter_topic=dead) as reader:
        got = read(reader, 2, until=lambda got: reader.parked_count == 2 and len(got) == 2)
        assert [e.event.step for e in got] == [0, 2]
        assert reader.parked_count == 2
        committed = reader.commit()
    assert [(o.partition, o.offset) for o in committed] == [(0, 4)]
    with EventReader.open(kafka, f"ops-{unique}", [dead]) as reader:
        letters = read(reader, 2)
    parked = sorted((e.event for e in letters), key=lambda d: d.source_offset)
    assert all(isinstance(d, DeadLetter) for d in parked)
    assert [(d.source_topic, d.source_partition, d.source_offset) for d in parked] == [
        (topic, 0, 1),
        (topic, 0, 3),
    ]
    assert parked[0].payload == garbage and parked[0].source_key == b"bad"
    assert parked[1].payload == b"not avro at all"
    assert all(d.error_class.startswith("rft.errors.") for d in parked)
    assert all(d.consumer == group for d in parked)
    # the group moved past the poison records: nothing is read or parked again
    with EventReader.open(kafka, group, [topic], dead_letter_topic=dead) as reader:
        assert read_nothing_more(reader) == []
        assert reader.parked_count == 0


def test_parked_record_at_the_end_is_committed_with_the_batch_before_it(
    kafka: KafkaSettings, unique: str
) -> None:
    topic = make_topic(kafka, f"t.{unique}.tail")
    dead = make_topic(kafka, f"t.{unique}.dead-letter")
    with EventWriter.open(kafka) as writer:
        writer.send(topic, metric(0))
        writer.send_raw(topic, b"junk")
    with EventReader.open(kafka, f"g-{unique}", [topic], dead_letter_topic=dead) as reader:
        got = read(reader, 1, until=lambda got: reader.parked_count == 1 and len(got) == 1)
        committed = reader.commit(got)
    assert [(o.partition, o.offset) for o in committed] == [(0, 2)]


def test_without_dead_letter_topic_a_corrupt_record_stops_the_reader_in_place(
    kafka: KafkaSettings, unique: str
) -> None:
    topic = make_topic(kafka, f"t.{unique}.stop")
    with EventWriter.open(kafka) as writer:
        writer.send(topic, metric(0))
        writer.send_raw(topic, b"junk")
    with EventReader.open(kafka, f"g-{unique}", [topic]) as reader:
        got: list[Envelope] = []
        with pytest.raises(DecodeError, match=rf"{topic}\[0\]@1"):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                got += reader.poll(10, 0.5)
        with pytest.raises(DecodeError, match=rf"{topic}\[0\]@1"):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                got += reader.poll(10, 0.5)
    assert [e.event.step for e in got] in ([], [0])


def test_trace_context_travels_in_headers(kafka: KafkaSettings, unique: str) -> None:
    topic = make_topic(kafka, f"t.{unique}.trace")
    tracer = TracerProvider().get_tracer("test")
    with EventWriter.open(kafka) as writer:
        with tracer.start_as_current_span("rollout") as span:
            writer.send(topic, metric(0))
            sent = span.get_span_context()
        writer.send(topic, metric(1))  # outside any span: no trace headers
    with EventReader.open(kafka, f"g-{unique}", [topic]) as reader:
        first, second = read(reader, 2)
    assert first.header("traceparent") is not None
    received = get_current_span(first.trace_context).get_span_context()
    assert (received.trace_id, received.span_id) == (sent.trace_id, sent.span_id)
    assert received.is_remote
    assert second.header("traceparent") is None
    with tracer.start_as_current_span("train", context=first.trace_context) as child:
        assert child.get_span_context().trace_id == sent.trace_id


def test_ensure_topics_is_idempotent_and_shapes_topics(kafka: KafkaSettings, unique: str) -> None:
    settings = dataclasses.replace(kafka, partitions=3, retention_ms=3_600_000)
    names = TopicNames.for_run(f"p{unique}", "run1")
    created = ensure_topics(settings, names)
    assert sorted(created) == sorted(names.all())
    assert ensure_topics(settings, names) == []
    with kafka_backend(settings).admin() as admin:
        listed = admin.list_topics()
        assert set(names.all()) <= set(listed)
        experiences, weights = admin.describe_topics([names.experiences, names.weights])
    assert len(experiences.partitions) == 3 and experiences.replication_factor == 1
    assert experiences.configs["retention.ms"] == "3600000"
    assert len(weights.partitions) == 1


def test_unreachable_broker_is_an_error_not_a_hang(kafka: KafkaSettings) -> None:
    nowhere = dataclasses.replace(kafka, bootstrap_servers="127.0.0.1:1")
    with EventReader.open(nowhere, "g", ["t"], unreachable_timeout_s=2.0) as reader:
        started = time.monotonic()
        # kafka-python fails while bootstrapping (TransportError), confluent once its outage
        # window is spent (OutageError): either way the address is named, and soon
        with pytest.raises((TransportError, OutageError), match="127.0.0.1:1"):
            while time.monotonic() - started < 60:
                reader.poll(10, 0.5)
    with kafka_backend(nowhere).admin() as admin, pytest.raises(TransportError):
        admin.list_topics(timeout_s=2.0)


def test_a_member_that_works_past_its_poll_interval_loses_its_commit(
    kafka: KafkaSettings, unique: str
) -> None:
    """`max.poll.interval.ms` given as reader config reaches both clients: a member that works
    longer than it between polls is dropped, and its commit fails as a TransportError (which the
    trainer survives and `RunPlan.consumer_config` sizes so a real step never hits)."""
    topic = make_topic(kafka, f"{unique}.poll")
    with EventWriter.open(kafka) as writer:
        for step in range(3):
            writer.send(topic, metric(step))
        writer.flush()
    short = {
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "max.poll.interval.ms": 7000,
    }
    with EventReader.open(kafka, f"{unique}-short", [topic], config=short) as reader:
        assert len(read(reader, 3)) == 3
        time.sleep(10)  # longer than max.poll.interval.ms: the client leaves the group
        with pytest.raises(TransportError, match="commit"):
            reader.commit()
        # the next poll rejoins the group (no error), and reading and committing go on
        with EventWriter.open(kafka) as writer:
            writer.send(topic, metric(3))
            writer.flush()
        assert read(reader, 1, timeout_s=60.0)
        assert reader.commit()
    roomy = {**short, "max.poll.interval.ms": 60000}
    with EventReader.open(kafka, f"{unique}-roomy", [topic], config=roomy) as reader:
        assert len(read(reader, 3)) == 3
        time.sleep(10)
        assert reader.commit()  # still a member: the same pause within its interval commits


def test_partition_bounds_count_records_and_stop_at_open_transactions(
    kafka: KafkaSettings, unique: str
) -> None:
    topic = make_topic(kafka, f"t.{unique}.bounds", partitions=2)
    with EventWriter.open(kafka) as writer:
        for i in range(5):
            writer.send(topic, metric(i), key="a")
    with kafka_backend(kafka).admin() as admin:
        bounds = admin.partition_bounds([topic])
        assert [(b.topic, b.partition) for b in bounds] == [(topic, 0), (topic, 1)]
        assert sum(b.high - b.low for b in bounds) == 5
        assert all(b.low == 0 for b in bounds)
        with EventWriter.open(kafka, transactional_id=f"tx-{unique}") as tx:
            tx.begin()
            tx.send(topic, metric(9), key="a")
            tx.flush()
            # an open transaction moves the high watermark, not the last stable offset
            moved = {b.partition: b.high for b in admin.partition_bounds([topic])}
            stable = {b.partition: b.high for b in admin.partition_bounds([topic], committed=True)}
            tx.commit()
        assert sum(moved.values()) == 6
        assert sum(stable.values()) == 5
        with pytest.raises(TransportError, match="no-such-topic"):
            admin.partition_bounds([f"t.{unique}.no-such-topic"])


def test_offsets_for_timestamp_find_the_first_record_at_or_after_it(
    kafka: KafkaSettings, unique: str
) -> None:
    topic = make_topic(kafka, f"t.{unique}.times")
    with EventWriter.open(kafka) as writer:
        for i in range(3):
            writer.send(topic, metric(i))
        writer.flush()
        time.sleep(0.05)
        middle_ms = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(3, 7):
            writer.send(topic, metric(i))
    with kafka_backend(kafka).admin() as admin:
        assert admin.offsets_for_timestamp([topic], middle_ms) == {(topic, 0): 3}
        assert admin.offsets_for_timestamp([topic], 0) == {(topic, 0): 0}
        later = int(time.time() * 1000) + 60_000
        assert admin.offsets_for_timestamp([topic], later) == {(topic, 0): 7}  # the end


def test_positions_pass_transaction_markers_to_the_end(kafka: KafkaSettings, unique: str) -> None:
    topic = make_topic(kafka, f"t.{unique}.pos")
    with EventWriter.open(kafka, transactional_id=f"tx-{unique}") as writer:
        for step in range(2):
            writer.begin()
            writer.send(topic, metric(step))
            writer.commit()
    with kafka_backend(kafka).admin() as admin:
        (bounds,) = admin.partition_bounds([topic])
    assert bounds.high == 4  # two records, each followed by its commit marker
    with EventReader.open(kafka, f"g-{unique}", [topic]) as reader:
        got = read(reader, 2)
        deadline = time.monotonic() + 30
        while reader.positions().get((topic, 0)) != bounds.high:
            assert time.monotonic() < deadline, reader.positions()
            got += reader.poll(10, 0.2)
    assert [e.offset for e in got] == [0, 2]


def test_groups_are_listed_described_and_their_offsets_read(
    kafka: KafkaSettings, unique: str
) -> None:
    topic = make_topic(kafka, f"t.{unique}.groups", partitions=2)
    with EventWriter.open(kafka) as writer:
        for i in range(6):
            writer.send(topic, metric(i), key=f"k{i}")
    group = f"g-{unique}"
    with (
        kafka_backend(kafka).admin() as admin,
        EventReader.open(kafka, group, [topic]) as reader,
    ):
        got = read(reader, 6)
        reader.commit(got[:1], metadata='{"step": 7}')
        assert group in admin.list_groups()
        (live,) = admin.describe_groups([group])
        assert live.state == "stable"
        (member,) = live.members
        assert sorted(member.assignment) == [(topic, 0), (topic, 1)]
        (committed,) = admin.group_offsets(group)
        first = got[0]
        assert (committed.topic, committed.partition, committed.offset) == (
            topic,
            first.partition,
            first.offset + 1,
        )
        assert committed.metadata == '{"step": 7}'
    with kafka_backend(kafka).admin() as admin:
        deadline = time.monotonic() + 30
        while (left := admin.describe_groups([group])[0]).state != "empty":
            assert time.monotonic() < deadline, left
            time.sleep(0.5)
        assert left.members == ()
        (never,) = admin.describe_groups([f"never-{unique}"])
        assert never.state == "dead" and never.members == ()
        assert admin.group_offsets(f"never-{unique}") == []


def test_a_consumer_with_a_small_prefetch_still_reads_everything(
    kafka: KafkaSettings, unique: str
) -> None:
    topic = make_topic(kafka, f"t.{unique}.prefetch", partitions=2)
    big = np.zeros(150_000, dtype=np.int32)  # 0.6 MB per event: two outgrow the prefetch
    events = [
        Experience(
            experience_id=f"e{i}",
            task_id=f"t{i}",
            group_id="g",
            group_size=1,
            explorer_id="x",
            model_version=0,
            prompt_ids=big,
            response_ids=[],
            logprobs=[],
        )
        for i in range(8)
    ]
    with EventWriter.open(kafka) as writer:
        for e in events:
            writer.send(topic, e, key=e.task_id)
    consumer = kafka_backend(kafka).consumer(f"g-{unique}", [topic], prefetch_bytes=1 << 20)
    with EventReader(consumer, EventCodec.default(), None) as reader:
        got = read(reader, 8)
    assert sorted(e.event.experience_id for e in got) == [f"e{i}" for i in range(8)]


@pytest.mark.parametrize("resume", [Resume.COMMITTED, Resume.CONTINUE])
def test_a_partition_handed_back_is_read_from_the_readers_resume_position(
    kafka: KafkaSettings, unique: str, resume: Resume
) -> None:
    """After a member loses its partitions and gets them straight back (here: it rejoins the
    group, as after a fence the broker made on its own), a COMMITTED reader reads each one again
    from the group's committed offset (or its start), and a CONTINUE reader goes on after the
    last record it handed out: nothing skipped, and for CONTINUE nothing handed out twice."""
    topic = make_topic(kafka, f"t.{unique}.back", partitions=2)
    sent = [metric(i) for i in range(40)]
    with EventWriter.open(kafka) as writer:
        for m in sent:
            writer.send(topic, m, key=str(m.step))
    with EventReader.open(kafka, f"g-{unique}", [topic], resume=resume) as reader:
        before = read(reader, 20)
        committed = reader.commit(before[:5])
        held = set(reader.assignment())
        reader.rejoin()
        after = read(
            reader,
            0,
            until=lambda got: (
                {e.event.step for e in before + got} == set(range(40))
                and set(reader.assignment()) == held
            ),
        )
        after += read_nothing_more(reader, 2.0)
        assert reader.take_revoked() == held
    starts = {(c.topic, c.partition): c.offset for c in committed}
    for tp in held:
        again = [e.offset for e in after if (e.topic, e.partition) == tp]
        handed = [e.offset for e in before if (e.topic, e.partition) == tp]
        if resume is Resume.CONTINUE:
            expected_start = max(handed) + 1 if handed else None
        else:
            expected_start = starts.get(tp, min(handed) if handed else None)
        if again and expected_start is not None:
            assert again[0] == expected_start, (tp, again[:3], expected_start)
        assert again == sorted(set(again))  # in order, each once, within the re-read
    steps = [e.event.step for e in after]
    if resume is Resume.CONTINUE:
        assert sorted(e.event.step for e in before + after) == list(range(40))
    else:
        assert {e.event.step for e in before} | set(steps) == set(range(40))
        assert len(steps) == len(set(steps))


def poll_into(
    consumer: RecordConsumer,
    got: list[tuple[int, int]],
    until: Callable[[], bool],
    deadline: float,
) -> None:
    """Poll, adding each record's (partition, offset) to `got`, until `until()` holds; then a
    second more, for records that should not come."""
    while not until():
        assert time.monotonic() < deadline, got
        got += [(r.partition, r.offset) for r in consumer.poll(10, 0.2)]
    got += [(r.partition, r.offset) for _ in range(5) for r in consumer.poll(10, 0.2)]


def send_to_two_partitions(producer: RecordProducer, topic: str, each: int) -> None:
    for i in range(2 * each):
        producer.produce(topic, b"%d" % i, partition=i % 2)
    producer.flush()


def test_a_paused_partition_is_not_read_until_resumed(kafka: KafkaSettings, unique: str) -> None:
    topic = make_topic(kafka, f"t.{unique}.pause", partitions=2)
    backend = kafka_backend(kafka)
    with backend.consumer(f"g-{unique}", [topic]) as consumer, backend.producer() as producer:
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline
            assert consumer.poll(1, 0.2) == []
        consumer.pause([(topic, 1), (topic, 7)])  # one the topic lacks is no error
        send_to_two_partitions(producer, topic, 10)
        got: list[tuple[int, int]] = []
        poll_into(consumer, got, lambda: len(got) >= 10, deadline)
        assert got == [(0, i) for i in range(10)]
        consumer.resume([(topic, 1)])
        poll_into(consumer, got, lambda: len(got) >= 20, deadline)
        assert got[10:] == [(1, i) for i in range(10)]


def test_a_pause_holds_when_the_partition_is_assigned_again(
    kafka: KafkaSettings, unique: str
) -> None:
    """A member that works past its poll interval leaves its group and joins it again on its next
    poll, and a rejoin makes a new client: kafka-python resumes every partition it assigns, and a
    new librdkafka client knows no pause, so the partition the caller had paused (a RangeReader's
    memory bound) would be fetched again unless the pause is made again."""
    topic = make_topic(kafka, f"t.{unique}.repause", partitions=2)
    short = {
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "max.poll.interval.ms": 7000,
    }
    backend = kafka_backend(kafka)
    with (
        backend.consumer(f"g-{unique}", [topic], config=short) as consumer,
        backend.producer() as producer,
    ):
        deadline = time.monotonic() + 90
        got: list[tuple[int, int]] = []

        def read_of_partition_0(count: int) -> Callable[[], bool]:
            return lambda: (
                len({o for p, o in got if p == 0}) >= count and len(consumer.assignment()) == 2
            )

        poll_into(consumer, got, read_of_partition_0(0), deadline)
        consumer.pause([(topic, 1)])
        time.sleep(10)  # past max.poll.interval.ms: the member leaves the group
        send_to_two_partitions(producer, topic, 10)
        poll_into(consumer, got, read_of_partition_0(10), deadline)
        assert consumer.take_revoked() == {(topic, 0), (topic, 1)}  # handed back, not kept
        consumer.rejoin()
        send_to_two_partitions(producer, topic, 10)
        poll_into(consumer, got, read_of_partition_0(20), deadline)
        assert set(got) == {(0, i) for i in range(20)}
        consumer.resume([(topic, 1)])
        poll_into(consumer, got, lambda: len(set(got)) >= 40, deadline)
        assert set(got) == {(p, i) for p in (0, 1) for i in range(20)}


def test_a_seek_and_a_pause_made_before_the_assignment_both_hold(
    kafka: KafkaSettings, unique: str
) -> None:
    """The pause is made in the rebalance callback right after the assignment, which carries the
    kept seek: the seek must not be lost to it (librdkafka issue 2190 says it could be)."""
    topic = make_topic(kafka, f"t.{unique}.seekpause", partitions=2)
    backend = kafka_backend(kafka)
    with backend.producer() as producer:
        send_to_two_partitions(producer, topic, 10)
    with backend.consumer(f"g-{unique}", [topic]) as consumer:
        consumer.seek(topic, 1, 5)
        consumer.pause([(topic, 1)])
        deadline = time.monotonic() + 30
        got: list[tuple[int, int]] = []
        poll_into(consumer, got, lambda: len(got) >= 10, deadline)
        assert got == [(0, i) for i in range(10)]
        consumer.resume([(topic, 1)])
        poll_into(consumer, got, lambda: len(got) >= 15, deadline)
        assert got[10:] == [(1, i) for i in range(5, 10)]
