"""PartitionMerge: whatever order and chunks records arrive in, the same sequence comes out (the
records sorted by index in span, topic and partition), and a resume from the positions after any
prefix of it delivers exactly the rest."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from rft.consumers.replay.partition_merge import Partition, PartitionMerge

Spans = dict[Partition, tuple[int, int]]
Records = dict[Partition, list[int]]  # offsets holding a record, ascending; the others are gaps


@st.composite
def ranges(draw: st.DrawFn) -> tuple[Spans, Records]:
    """Spans of one to four partitions over one or two topics, each with records at some of
    its offsets (the rest stand for transaction markers and aborted records)."""
    names = draw(
        st.lists(
            st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3)),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    spans: Spans = {}
    records: Records = {}
    for tp in names:
        start = draw(st.integers(0, 5))
        end = start + draw(st.integers(0, 12))
        spans[tp] = (start, end)
        offsets = st.sets(st.integers(start, end - 1)) if end > start else st.just(set())
        records[tp] = sorted(draw(offsets))
    return spans, records


def merge_order(spans: Mapping[Partition, tuple[int, int]], records: Records) -> list[tuple]:
    return sorted(
        ((off - spans[tp][0], *tp, off) for tp, offs in records.items() for off in offs),
    )


def as_keys(spans: Spans, got: list[tuple[Partition, int, str]]) -> list[tuple]:
    return [(off - spans[tp][0], *tp, off) for tp, off, _ in got]


def deliver(
    merge: PartitionMerge[str],
    records: Records,
    data: st.DataObject,
    stop_after: int | None = None,
) -> list[tuple[Partition, int, str]]:
    """Feed `merge` like a consumer whose fetches land at random: chunks of one partition's
    records, positions reported late or not at all, takes of random sizes in between; once
    everything arrived, the final positions (past the last markers). Stops after `stop_after`
    deliveries when given."""
    left = {tp: [o for o in offs if o >= merge.fetched(tp)] for tp, offs in records.items()}
    got: list[tuple[Partition, int, str]] = []

    def take(count: int) -> bool:
        for _ in range(count):
            if stop_after is not None and len(got) >= stop_after:
                return True
            item = merge.take()
            if item is None:
                return False
            got.append(item)
        return False

    def position(tp: Partition) -> int:
        return left[tp][0] if left[tp] else merge.spans[tp][1]

    while any(left.values()):
        action = data.draw(st.sampled_from(["arrive", "moved", "take"]))
        tp = data.draw(st.sampled_from(sorted(left)))
        if action == "arrive" and left[tp]:
            count = data.draw(st.integers(1, len(left[tp])))
            for off in left[tp][:count]:
                assert merge.add(tp, off, f"{tp}@{off}")
            del left[tp][:count]
        elif action == "moved":
            # a late position: anywhere between what arrived and where the consumer stands
            merge.moved(tp, data.draw(st.integers(merge.fetched(tp), position(tp))))
        elif take(data.draw(st.integers(1, 5))):
            return got
    for tp in merge.spans:
        merge.moved(tp, merge.spans[tp][1])
    take(10_000)
    return got


@settings(max_examples=200, deadline=None)
@given(ranges(), st.data())
def test_any_arrival_order_delivers_the_records_sorted_by_index_topic_and_partition(
    rng: tuple[Spans, Records], data: st.DataObject
) -> None:
    spans, records = rng
    merge: PartitionMerge[str] = PartitionMerge(spans)
    got = deliver(merge, records, data)
    assert as_keys(spans, got) == merge_order(spans, records)
    assert all(item == f"{tp}@{off}" for tp, off, item in got)
    assert merge.exhausted
    assert all(merge.buffered(tp) == 0 for tp in spans)


@settings(max_examples=200, deadline=None)
@given(ranges(), st.data())
def test_a_resume_from_the_positions_after_any_prefix_delivers_exactly_the_rest(
    rng: tuple[Spans, Records], data: st.DataObject
) -> None:
    spans, records = rng
    expected = merge_order(spans, records)
    cut = data.draw(st.integers(0, len(expected)))
    first: PartitionMerge[str] = PartitionMerge(spans)
    before = deliver(first, records, data, stop_after=cut)
    assert as_keys(spans, before) == expected[:cut]
    resumed: PartitionMerge[str] = PartitionMerge(spans)
    for tp in spans:
        resumed.seek(tp, first.position(tp))
    after = deliver(resumed, records, data)
    assert as_keys(spans, after) == expected[cut:]


def test_a_head_waits_for_a_partition_that_may_still_hold_a_smaller_key() -> None:
    merge: PartitionMerge[str] = PartitionMerge({("t", 0): (0, 10), ("t", 1): (100, 110)})
    merge.add(("t", 1), 100, "b0")
    merge.add(("t", 1), 101, "b1")
    assert merge.take() is None  # t[0] may hold index 0, which comes first
    assert merge.waiting_on() == [("t", 0)]
    merge.add(("t", 0), 0, "a0")
    assert [merge.take(), merge.take()] == [(("t", 0), 0, "a0"), (("t", 1), 100, "b0")]
    assert merge.take() is None  # t[0] index 1 may come before t[1] index 1
    merge.moved(("t", 0), 2)  # offset 1 was a transaction marker
    assert merge.take() == (("t", 1), 101, "b1")
    assert merge.position(("t", 1)) == 102 and not merge.exhausted
    merge.moved(("t", 0), 10)
    merge.moved(("t", 1), 110)
    assert merge.take() is None and merge.exhausted


def test_records_outside_the_spans_or_before_a_position_are_refused() -> None:
    merge: PartitionMerge[str] = PartitionMerge({("t", 0): (5, 8)})
    assert not merge.add(("t", 1), 5, "other partition")
    assert not merge.add(("t", 0), 4, "before the span")
    assert not merge.add(("t", 0), 8, "past the end")
    assert merge.add(("t", 0), 6, "x", size=10)
    assert not merge.add(("t", 0), 6, "again")
    assert merge.buffered_bytes(("t", 0)) == 10
    merge.seek(("t", 0), 5)
    assert merge.buffered(("t", 0)) == 0 and merge.buffered_bytes(("t", 0)) == 0
