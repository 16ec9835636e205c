"""OffsetLedger: a resume from the safe offsets re-reads every untrained experience and no trained one
before the first untrained one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rft.buffer.offset_ledger import OffsetLedger


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
