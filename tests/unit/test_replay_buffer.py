"""The replay buffer (`experience_buffer.capacity`, `replay_buffer.reuse_cooldown_time`,
`priority_fn`): highest priority first with ties to the earlier group, cooldowns, use-count
limits, lowest-priority eviction; and durability: a trainer restarted from a saved state and the
log trains exactly the batches, with the same use counts, as one that never stopped."""

from __future__ import annotations

import json
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from rft.buffer.group_sampler import SamplerSetup
from rft.buffer.offset_ledger import OffsetLedger
from rft.buffer.replay_buffer import ReplaySettings
from rft.buffer.sample_strategy import build_sampler
from rft.buffer.sampler import Admitted, Sampler
from tests.unit.experience_log import GroupSpec, write_log


class Clock:
    """Seconds that pass only when the test says so (cooldowns without sleeping)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def replay_sampler(
    batch: int,
    capacity: int,
    cooldown: float | None,
    clock: Clock,
    fn: str = "linear_decay",
    **args: float,
) -> Sampler:
    replay = ReplaySettings(capacity, cooldown, fn, args)
    setup = SamplerSetup(train_batch_size=batch, replay=replay, clock=clock)
    return build_sampler("default", {}, setup)


def versions_of(sampler: Sampler, version: int) -> list[tuple[int, int]]:
    batch = sampler.take_batch(version)
    assert batch is not None
    seen = []
    for r in batch.rows:
        if (r.exp.model_version, r.use_count) not in seen:
            seen.append((r.exp.model_version, r.use_count))
    return seen


def test_priority_order_ties_eviction_and_reuse() -> None:
    clock = Clock()
    sampler = replay_sampler(4, capacity=8, cooldown=0.0, clock=clock, decay=2.0)
    log = write_log([GroupSpec(2, v, (0.0, 1.0)) for v in range(5)])
    for item in log:
        sampler.add(item)
    # five groups of two in a buffer of eight: version 0 (priority 0, the lowest) was evicted
    assert sampler.counters.evicted == 2
    assert {a.exp.model_version for a in sampler.release()} == {0}
    # priority = version - 2 * uses: 4 and 3 first, then 2 (seq 2) ties with 4 after one use
    # (4 - 2 = 2, seq 4) and the earlier group wins; 1 ties with 3 (3 - 2) the same way
    assert versions_of(sampler, 10) == [(4, 1), (3, 1)]
    assert versions_of(sampler, 10) == [(2, 1), (4, 2)]
    assert versions_of(sampler, 10) == [(1, 1), (3, 2)]
    assert sampler.counters.replayed_rows == 4
    assert sampler.release() == []  # all still held for reuse


def test_cooldown_holds_a_group_back_and_none_trains_once() -> None:
    clock = Clock()
    sampler = replay_sampler(2, capacity=10, cooldown=30.0, clock=clock)
    for item in write_log([GroupSpec(2, 0, (0.0, 1.0))]):
        sampler.add(item)
    assert versions_of(sampler, 0) == [(0, 1)]
    assert sampler.take_batch(0) is None  # cooling down
    clock.now += 29.9
    assert sampler.take_batch(0) is None
    clock.now += 0.2
    assert versions_of(sampler, 0) == [(0, 2)]

    once = replay_sampler(2, capacity=10, cooldown=None, clock=clock)
    for item in write_log([GroupSpec(2, 0, (0.0, 1.0))]):
        once.add(item)
    assert versions_of(once, 0) == [(0, 1)]
    clock.now += 1e6
    assert once.take_batch(0) is None
    assert once.counters.retired == 2 and len(once.release()) == 2


def test_use_count_limit_retires_and_a_full_buffer_rejects_lower_priorities() -> None:
    clock = Clock()
    sampler = replay_sampler(
        2,
        capacity=4,
        cooldown=0.0,
        clock=clock,
        fn="linear_decay_use_count_control_randomization",
        decay=1.0,
        use_count_limit=2,
    )
    log = write_log(
        [GroupSpec(2, 5, (0.0, 1.0)), GroupSpec(2, 6, (1.0, 0.0)), GroupSpec(2, 1, (1.0, 0.0))]
    )
    for item in log[:4]:
        sampler.add(item)
    for item in log[4:]:  # priority 1 < the lowest held (5): refused, not trained
        sampler.add(item)
    assert sampler.counters.rejected == 2
    assert {a.exp.model_version for a in sampler.release()} == {1}
    got = [versions_of(sampler, 6) for _ in range(4)]
    # 6 (p6) -> 5 (p5) and 6 after one use (p5) tie: 5 arrived first -> 6 (p5) -> 5 (p4)
    assert got == [[(6, 1)], [(5, 1)], [(6, 2)], [(5, 2)]]
    assert sampler.take_batch(6) is None  # both used twice: retired
    assert sampler.counters.retired == 4
    assert len(sampler.release()) == 4


def drive(
    log: list[Admitted], make, steps: int, clock: Clock, restart_at: int | None = None
) -> list[list[tuple[str, int]]]:
    """The trainer loop's order (ingest, take a batch, settle, save) over a log written before
    the trainer starts; at `restart_at` the trainer is replaced by one restored from what a
    weight version saves (through JSON) that reads the log again from the safe offsets."""
    sampler, ledger = make(), OffsetLedger()

    def ingest(items: list[Admitted]) -> None:
        for it in items:
            if ledger.polled(it.tp, it.offset):
                sampler.add(it)

    ingest(log)
    history = []
    for version in range(steps):
        clock.now += 1.0
        batch = sampler.take_batch(version)
        if batch is None:
            break
        history.append([(r.exp.experience_id, r.use_count) for r in batch.rows])
        for a in sampler.release():
            ledger.settled(a.tp, a.offset)
        if version + 1 == restart_at:
            safe = ledger.safe_offsets()
            saved = json.loads(
                json.dumps(
                    {
                        "sampler": sampler.state(),
                        "ahead": [[t, p, o] for (t, p), o in ledger.settled_ahead().items()],
                    }
                )
            )
            sampler, ledger = make(), OffsetLedger()
            ahead = {(t, p): o for t, p, o in saved["ahead"]}
            for tp, offset in safe.items():
                ledger.start(tp, offset, ahead.get(tp, []))
            sampler.restore(saved["sampler"])
            ingest([a for a in log if a.offset >= safe[a.tp]])
    return history


@settings(max_examples=120, deadline=None)
@given(
    groups=st.lists(
        st.builds(GroupSpec, st.integers(1, 4), st.integers(0, 3), st.just((0.0, 1.0, 0.0, 1.0))),
        min_size=1,
        max_size=14,
    ),
    batch=st.integers(1, 6),
    extra_capacity=st.integers(0, 20),
    cooldown=st.sampled_from([None, 0.0, 1.5]),
    limit=st.integers(0, 3),
    sigma=st.sampled_from([0.0, 0.7]),
    partitions=st.integers(1, 3),
    staleness=st.sampled_from([None, 2]),
    restart_at=st.integers(1, 12),
)
def test_a_restarted_trainer_continues_exactly(
    groups, batch, extra_capacity, cooldown, limit, sigma, partitions, staleness, restart_at
) -> None:
    log = write_log([GroupSpec(g.size, g.version, g.rewards[: g.size]) for g in groups], partitions)

    def make() -> Sampler:
        replay = ReplaySettings(
            batch + extra_capacity,
            cooldown,
            "linear_decay_use_count_control_randomization",
            {"decay": 1.0, "use_count_limit": limit, "sigma": sigma},
        )
        args = {} if staleness is None else {"max_staleness": staleness}
        strategy = "default" if staleness is None else "staleness_control"
        return build_sampler(strategy, args, SamplerSetup(batch, replay, clock=clock))

    clock = Clock()
    straight = drive(log, make, 14, clock)
    clock = Clock()
    restarted = drive(log, make, 14, clock, restart_at)
    assert restarted == straight
    uses = Counter(exp for rows in straight for exp, _ in rows)
    for rows in straight:
        for _, count in rows:
            assert limit <= 0 or count <= limit
    # each row's use count is how often that experience has been trained so far
    running: Counter[str] = Counter()
    for rows in straight:
        for exp, count in rows:
            running[exp] += 1
            assert running[exp] == count
    assert running == uses


def test_a_restored_group_whose_member_is_gone_is_given_up(caplog) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    log = write_log([GroupSpec(2, 0, (0.0, 1.0)), GroupSpec(2, 1, (1.0, 0.0))])
    first = replay_sampler(2, capacity=10, cooldown=0.0, clock=clock)
    for item in log:
        first.add(item)
    assert versions_of(first, 1) == [(1, 1)]
    saved = json.loads(json.dumps(first.state()))
    second = replay_sampler(2, capacity=10, cooldown=0.0, clock=clock)
    second.restore(saved)
    assert second.take_batch(1) is None  # restored groups wait for their members
    # offset 0 (a member of g0) is not read again: the next read proves it gone
    for item in log[1:]:
        second.add(item)
    assert "no longer on the experience topic" in caplog.text
    assert second.counters.evicted == 1
    assert [a.offset for a in second.release()] == [1]
    assert versions_of(second, 1) == [(1, 2)]  # g1 kept its use count


@settings(max_examples=80, deadline=None)
@given(
    versions=st.lists(st.integers(0, 5), min_size=1, max_size=6),
    cooldown=st.sampled_from([None, 0.0]),
    fn=st.sampled_from(["linear_decay", "linear_decay_use_count_control_randomization"]),
    limit=st.integers(0, 4),
    sigma=st.sampled_from([0.0, 0.7]),
)
def test_allows_uses_agrees_with_the_buffer(
    versions: list[int], cooldown: float | None, fn: str, limit: int, sigma: float
) -> None:
    """What the run checker judges "trained twice" by: each group the buffer trained n times is
    allowed n uses, and one it retired after n uses is not allowed n + 1."""
    args = {} if fn == "linear_decay" else {"use_count_limit": limit, "sigma": sigma}
    replay = ReplaySettings(100, cooldown, fn, args)
    clock = Clock()
    sampler = build_sampler(
        "default", {}, SamplerSetup(train_batch_size=2, replay=replay, clock=clock)
    )
    for item in write_log([GroupSpec(2, v, (0.0, 1.0)) for v in versions]):
        sampler.add(item)
    uses: Counter[str] = Counter()
    retired: set[str] = set()
    for _ in range(4 * len(versions) + 4):
        clock.now += 1.0
        batch = sampler.take_batch(10)
        if batch is None:
            break
        uses.update({r.exp.group_id for r in batch.rows})
        retired |= {a.exp.group_id for a in sampler.release()}
    assert uses
    for group, n in uses.items():
        version = versions[int(group[1:])]
        assert replay.allows_uses(version, group, n), (group, n)
        if group in retired:
            assert not replay.allows_uses(version, group, n + 1), (group, n)
