"""TaskMerge (rft.consumers.tasks.order): tasks spread over partitions come out in published order,
whatever order the partitions' records arrive in; a batch never leaves a gap in a partition, so
committing the offset after each partition's last record skips nothing; what is dropped on a
rebalance or a rewind is read again and handed out once, in order."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.config.connections import KafkaSettings
from rft.config.stream_start import parse_stream_start
from rft.consumers.tasks.order import Partition, PartitionEnds, TaskMerge
from rft.events.models import Metric, Task
from rft.events.reader import Envelope

TOPIC = "p.n.tasks"


def envelope(event: Task | Metric, partition: int, offset: int) -> Envelope:
    return Envelope(event, TOPIC, partition, offset, None, [], 0)


@dataclass
class Topic:
    """Partitions of records as a publisher left them: each task at the partition its key
    chose, offsets increasing with gaps (transaction markers)."""

    records: dict[Partition, list[Envelope]]

    @classmethod
    def publish(
        cls, partition_of: list[int], partitions: int, rng: random.Random, others: int = 0
    ) -> Topic:
        records: dict[Partition, list[Envelope]] = {(TOPIC, p): [] for p in range(partitions)}
        next_offset = dict.fromkeys(records, 0)
        for position, p in enumerate(partition_of):
            tp = (TOPIC, p)
            task = Task(f"s:0:{position}", "s", 0, rng.randrange(1000), {}, position=position)
            records[tp].append(envelope(task, p, next_offset[tp]))
            next_offset[tp] += rng.choice([1, 1, 2])
        for _ in range(others):  # events that are not tasks, anywhere in a partition
            tp = (TOPIC, rng.randrange(partitions))
            at = rng.randrange(len(records[tp]) + 1)
            before = records[tp][at - 1].offset if at else -1
            # renumber so offsets stay increasing
            rest = records[tp][at:]
            metric = envelope(Metric("c", "r", 0, {}), tp[1], before + 1)
            records[tp][at:] = [metric] + [
                envelope(e.event, tp[1], e.offset + 1)
                for e in rest  # type: ignore[arg-type]
            ]
        return cls(records)


@dataclass
class Reader:
    """Delivers a topic's records the way a consumer does: a run of one partition's records at
    a time, partitions in no particular order."""

    topic: Topic
    rng: random.Random
    cursor: dict[Partition, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cursor = dict.fromkeys(self.topic.records, 0)

    def poll(self, partitions: set[Partition]) -> list[Envelope]:
        pending = [tp for tp in sorted(partitions) if self.left(tp)]
        if not pending:
            return []
        tp = self.rng.choice(pending)
        run = self.rng.randint(1, self.left(tp))
        start = self.cursor[tp]
        self.cursor[tp] += run
        return self.topic.records[tp][start : start + run]

    def left(self, tp: Partition) -> int:
        return len(self.topic.records[tp]) - self.cursor[tp]

    def finished(self, partitions: set[Partition], fresh: bool) -> set[Partition]:
        return {tp for tp in partitions if not self.left(tp)}

    def seek(self, tp: Partition, offset: int) -> None:
        self.cursor[tp] = next(
            (i for i, e in enumerate(self.topic.records[tp]) if e.offset >= offset),
            len(self.topic.records[tp]),
        )


def steps(reader: Reader, assigned: set[Partition], batch: int) -> Iterator[list[Envelope]]:
    """What each take of a merge over `reader` hands out, polling when it comes short, until
    everything is read and handed out."""
    merge = TaskMerge()
    while True:
        got = merge.take(batch, assigned, reader.finished)
        assert len(got) <= batch
        yield got
        if len(got) < batch:
            polled = reader.poll(assigned)
            if not polled and not merge.buffered:
                return
            merge.add(polled)


def positions(envelopes: list[Envelope]) -> list[int]:
    return [e.event.position for e in envelopes if isinstance(e.event, Task)]  # type: ignore[misc]


def check_contiguous(batch: list[Envelope], topic: Topic, after: dict[Partition, int]) -> None:
    """Per partition, `batch` holds the records right after offset `after[tp]`, none skipped;
    `after` moves on past them (what committing the batch's offsets does)."""
    for tp, records in topic.records.items():
        mine = [e.offset for e in batch if (e.topic, e.partition) == tp]
        if not mine:
            continue
        expected = [e.offset for e in records if e.offset > after[tp]][: len(mine)]
        assert mine == expected, (tp, mine, expected)
        after[tp] = mine[-1]


layouts = st.integers(1, 6).flatmap(
    lambda k: st.tuples(st.just(k), st.lists(st.integers(0, k - 1), min_size=0, max_size=60))
)


@settings(max_examples=200, deadline=None)
@given(layout=layouts, batch=st.integers(1, 9), others=st.integers(0, 3), seed=st.integers())
def test_one_member_explores_the_published_sequence(
    layout: tuple[int, list[int]], batch: int, others: int, seed: int
) -> None:
    k, partition_of = layout
    rng = random.Random(seed)
    topic = Topic.publish(partition_of, k, rng, others)
    assigned = set(topic.records)
    out: list[Envelope] = []
    after = dict.fromkeys(assigned, -1)
    for got in steps(Reader(topic, rng), assigned, batch):
        check_contiguous(got, topic, after)
        out += got
    assert positions(out) == list(range(len(partition_of)))
    assert len(out) == len(partition_of) + others  # every record handed out once


@settings(max_examples=150, deadline=None)
@given(layout=layouts, batch=st.integers(1, 9), seed=st.integers(), share=st.integers(1, 5))
def test_members_of_a_group_each_follow_the_order_over_their_share(
    layout: tuple[int, list[int]], batch: int, seed: int, share: int
) -> None:
    k, partition_of = layout
    rng = random.Random(seed)
    topic = Topic.publish(partition_of, k, rng)
    mine = {tp for tp in topic.records if tp[1] % (share + 1) == 0}
    out = [env for got in steps(Reader(topic, rng), mine, batch) for env in got]
    expected = [pos for pos, p in enumerate(partition_of) if (TOPIC, p) in mine]
    assert positions(out) == expected


@settings(max_examples=150, deadline=None)
@given(layout=layouts, batch=st.integers(1, 9), seed=st.integers())
def test_a_head_waits_for_a_partition_not_read_to_its_end(
    layout: tuple[int, list[int]], batch: int, seed: int
) -> None:
    k, partition_of = layout
    rng = random.Random(seed)
    topic = Topic.publish(partition_of, k, rng)
    reader = Reader(topic, rng)
    handed: list[int] = []
    for got in steps(reader, set(topic.records), batch):
        for env in got:
            position = env.event.position  # type: ignore[union-attr]
            # nothing earlier is still unread anywhere, nor buffered
            unread = [
                e.event.position  # type: ignore[union-attr]
                for tp, records in topic.records.items()
                for e in records[reader.cursor[tp] :]
            ]
            assert all(p > position for p in unread)
            handed.append(position)
    assert handed == sorted(handed)


@settings(max_examples=200, deadline=None)
@given(
    layout=layouts,
    batch=st.integers(1, 9),
    seed=st.integers(),
    upsets=st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=8),
)
def test_dropped_partitions_are_read_again_from_the_commit_and_nothing_is_skipped(
    layout: tuple[int, list[int]],
    batch: int,
    seed: int,
    upsets: list[tuple[bool, int]],
) -> None:
    """Steps commit their batch's offsets; at random steps a partition is lost and comes back
    (the reader re-reads it from the committed offset) or a step is aborted (the reader goes
    back to its batch's first records): the merge drops what it buffered of them."""
    k, partition_of = layout
    rng = random.Random(seed)
    topic = Topic.publish(partition_of, k, rng)
    reader, merge = Reader(topic, rng), TaskMerge()
    assigned = set(topic.records)
    committed = dict.fromkeys(assigned, -1)  # offset of the last committed record
    explored: list[int] = []
    upsets_at = {i: upset for i, upset in enumerate(upsets)}
    step = 0
    while True:
        got: list[Envelope] = []
        while len(got) < batch:
            got += merge.take(batch - len(got), assigned, reader.finished)
            if len(got) < batch:
                polled = reader.poll(assigned)
                if not polled:
                    break
                merge.add(polled)
        if not got and not merge.buffered:
            break
        upset = upsets_at.get(step)
        step += 1
        if upset is not None:
            aborted, which = upset
            if aborted:  # the step's transaction failed: read its tasks again
                touched = {(e.topic, e.partition) for e in got}
                for tp in touched:
                    reader.seek(tp, min(e.offset for e in got if (e.topic, e.partition) == tp))
                merge.drop(touched)
                continue
            lost = sorted(assigned)[which % k]  # revoked and given back: from the commit
            reader.seek(lost, committed[lost] + 1)
            merge.drop({lost})
            got = [e for e in got if (e.topic, e.partition) != lost]
        check_contiguous(got, topic, committed)
        explored += positions(got)
    # each task explored once, and each partition's tasks in their published order
    assert sorted(explored) == list(range(len(partition_of)))
    for p in range(k):
        mine = [pos for pos in explored if partition_of[pos] == p]
        assert mine == sorted(mine)


def test_tasks_written_before_v2_merge_by_epoch_and_index() -> None:
    old = [Task(f"s:{e}:{i}", "s", e, i, {}) for e in range(2) for i in range(6)]
    rng = random.Random(0)
    spread: dict[int, list[Task]] = {0: [], 1: [], 2: []}
    for task in old:
        spread[rng.randrange(3)].append(task)
    merge = TaskMerge()
    for p, tasks in spread.items():
        merge.add(envelope(t, p, offset) for offset, t in enumerate(tasks))
    out = merge.take(100, {(TOPIC, p) for p in spread}, lambda ps, fresh: set(ps))
    assert [(t.event.epoch, t.event.index) for t in out] == [(t.epoch, t.index) for t in old]  # type: ignore[union-attr]


def test_partitions_not_assigned_any_more_are_not_handed_out() -> None:
    merge = TaskMerge()
    merge.add([envelope(Task("a", "s", 0, 0, {}, position=0), 0, 0)])
    merge.add([envelope(Task("b", "s", 0, 1, {}, position=1), 1, 0)])
    out = merge.take(5, {(TOPIC, 1)}, lambda ps, fresh: set(ps))
    assert [e.event.task_id for e in out] == ["b"]  # type: ignore[union-attr]
    assert merge.buffered == 0


def test_finished_is_asked_fresh_only_after_new_records() -> None:
    asked: list[bool] = []

    def finished(partitions: set[Partition], fresh: bool) -> set[Partition]:
        asked.append(fresh)
        return set()  # partition 1 still has unread records

    merge = TaskMerge()
    merge.add([envelope(Task("a", "s", 0, 0, {}, position=3), 0, 0)])
    both = {(TOPIC, 0), (TOPIC, 1)}
    assert merge.take(1, both, finished) == []
    assert merge.take(1, both, finished) == []
    assert asked == [True, False]
    merge.add([envelope(Task("b", "s", 0, 1, {}, position=1), 1, 0)])
    out = merge.take(2, both, lambda ps, fresh: set(ps))
    assert positions(out) == [1, 3]


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_with_kafka_away_no_partition_is_known_finished(client: str) -> None:
    """An admin call that fails in an outage leaves every partition unfinished for now (tasks keep
    their order) instead of ending the explorer."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kafka = KafkaSettings(bootstrap_servers=f"127.0.0.1:{port}", client=client)
    ends = PartitionEnds(kafka, "g", parse_stream_start("earliest"))
    reader = SimpleNamespace(positions=lambda: {})
    assert ends.finished(reader, {("tasks", 0), ("tasks", 1)}, fresh=True) == set()  # type: ignore[arg-type]
