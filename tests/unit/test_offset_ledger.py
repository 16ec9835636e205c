"""OffsetLedger: a resume from the safe offsets re-reads every untrained experience and no trained one
before the first untrained one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rft.buffer.offset_ledger import OffsetLedger, from_ranges, to_ranges


@given(st.integers(1, 60), st.data())
def test_resume_point_never_skips_an_untrained_offset(n: int, data: st.DataObject) -> None:
    settled = data.draw(st.sets(st.integers(0, n - 1)))
    ledger = OffsetLedger()
    tp = ("exp", 0)
    ledger.start(tp, 0)
    for off in range(n):
        ledger.polled(tp, off)
    for off in settled:
        ledger.settled(tp, off)
    safe = ledger.safe_offsets()[tp]
    untrained = set(range(n)) - settled
    # everything before the resume point was trained
    assert all(o in settled for o in range(safe))
    # every untrained offset is re-read
    assert all(o >= safe for o in untrained)
    if not untrained:
        assert safe == n


def test_start_offset_is_kept_when_nothing_polled() -> None:
    ledger = OffsetLedger()
    ledger.start(("exp", 3), 42)
    assert ledger.safe_offsets() == {("exp", 3): 42}


@given(st.integers(1, 60), st.data())
def test_offsets_settled_past_the_resume_point_are_skipped_after_a_restart(
    n: int, data: st.DataObject
) -> None:
    """Settled offsets beyond the first unsettled one are saved and skipped on the re-read, so a
    restart trains each experience at most once and reads every unsettled one again."""
    settled = data.draw(st.sets(st.integers(0, n - 1)))
    tp = ("exp", 0)
    before = OffsetLedger()
    before.start(tp, 0)
    for off in range(n):
        before.polled(tp, off)
    for off in settled:
        before.settled(tp, off)
    resume = before.safe_offsets()[tp]
    ahead = before.settled_ahead().get(tp, [])
    after = OffsetLedger()
    after.start(tp, resume, ahead)
    reread = [off for off in range(resume, n) if after.polled(tp, off)]
    assert set(reread) == set(range(n)) - settled
    assert after.safe_offsets()[tp] == (min(reread) if reread else n)


def test_settled_ahead_keeps_only_offsets_past_the_resume_point() -> None:
    ledger = OffsetLedger()
    tp = ("exp", 1)
    for off in range(6):
        ledger.polled(tp, off)
    for off in (0, 1, 3, 5):
        ledger.settled(tp, off)
    assert ledger.safe_offsets() == {tp: 2}
    assert ledger.settled_ahead() == {tp: [3, 5]}
    assert from_ranges(to_ranges([3, 5, 6, 7, 9])) == [3, 5, 6, 7, 9]
    assert to_ranges([3, 5, 6, 7, 9]) == [[3, 3], [5, 7], [9, 9]]


@given(st.integers(1, 40), st.data())
def test_a_reread_hands_out_each_offset_once(n: int, data: st.DataObject) -> None:
    """A reader put back at an older position (a rebalance after an outage) reads offsets again:
    those settled or still waiting in the sampler are skipped, so none is trained twice."""
    ledger = OffsetLedger()
    tp = ("exp", 0)
    ledger.start(tp, 0)
    handed = [o for o in range(n) if ledger.polled(tp, o)]
    for off in data.draw(st.sets(st.sampled_from(handed))):
        ledger.settled(tp, off)
    back_to = data.draw(st.integers(0, n - 1))
    again = [o for o in range(back_to, n) if ledger.polled(tp, o)]
    assert handed == list(range(n)) and again == []


@given(st.integers(1, 60), st.data())
def test_a_reader_put_back_behind_forgotten_offsets_trains_nothing_twice(
    n: int, data: st.DataObject
) -> None:
    """A rebalance after an outage can hand a partition back at the group's older committed
    offset, after the ledger has already forgotten the settled offsets behind its resume point
    (settled_ahead prunes them at each publish): re-reading from there yields only what is
    still unsettled and was never handed to the sampler, that is nothing below the resume point."""
    settled = data.draw(st.sets(st.integers(0, n - 1)))
    tp = ("exp", 0)
    ledger = OffsetLedger()
    ledger.start(tp, 0)
    for off in range(n):
        ledger.polled(tp, off)
    for off in settled:
        ledger.settled(tp, off)
    ledger.settled_ahead()  # a version is published: the settled offsets behind it are forgotten
    committed = data.draw(st.integers(0, n))  # where the group's older commit puts the reader
    fresh = [off for off in range(committed, n + 3) if ledger.polled(tp, off)]
    # only offsets never read before come back as new; every settled or in-flight one is skipped
    assert fresh == [off for off in range(committed, n + 3) if off >= n]
