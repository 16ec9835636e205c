"""GroupBatcher and StalenessPolicy: groups stay whole, nothing is lost, staleness is bounded."""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from rft.buffer.group_batcher import GroupBatcher
from rft.buffer.staleness import StalenessPolicy


@dataclass(frozen=True)
class Item:
    group_id: str
    group_size: int
    n: int


@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=20),
    st.integers(1, 24),
    st.randoms(use_true_random=False),
)
def test_batches_hold_whole_groups_and_lose_nothing(sizes, batch_size, rnd: random.Random) -> None:
    items = [Item(f"g{i}", size, k) for i, size in enumerate(sizes) for k in range(size)]
    rnd.shuffle(items)  # groups interleave on the wire
    batcher: GroupBatcher[Item] = GroupBatcher(batch_size)
    batches = []
    for it in items:
        batcher.add(it)
        while (b := batcher.take_batch()) is not None:
            batches.append(b)
    seen = [it for b in batches for it in b]
    leftovers = [it for g in batcher.ready for it in g]
    assert batcher.pending_count == 0
    assert sorted(map(id, seen + leftovers)) == sorted(map(id, items))
    for b in batches:
        groups = {it.group_id for it in b}
        for g in groups:  # every group in a batch is complete
            assert sum(1 for it in b if it.group_id == g) == next(
                it.group_size for it in b if it.group_id == g
            )
        # whole groups: a batch overshoots by less than one group
        assert batch_size <= len(b) < batch_size + max(sizes)


def test_incomplete_groups_are_handed_back() -> None:
    batcher: GroupBatcher[Item] = GroupBatcher(4)
    batcher.add(Item("a", 3, 0))
    batcher.add(Item("a", 3, 1))
    assert batcher.take_batch() is None
    leftover = batcher.flush_incomplete()
    assert [len(g) for g in leftover] == [2]
    assert batcher.pending_count == 0


@given(st.integers(0, 50), st.integers(0, 50), st.one_of(st.none(), st.integers(0, 10)))
def test_staleness_policy(trainer_v: int, model_v: int, limit: int | None) -> None:
    policy = StalenessPolicy(limit)
    lag = max(0, trainer_v - model_v)
    assert policy.staleness(trainer_v, model_v) == lag
    assert policy.accepts(trainer_v, model_v) == (limit is None or lag <= limit)
