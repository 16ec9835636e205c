"""The explorer's step, kept in commit metadata: round trip, the highest step wins, and metadata
that is not an explorer step is skipped, never guessed at."""

from __future__ import annotations

import logging

from hypothesis import given
from hypothesis import strategies as st

from rft.consumers.explorer.progress import progress_metadata, resumed_step
from rft.events.transport import TopicPartitionOffset


def at(partition: int, metadata: str) -> TopicPartitionOffset:
    return TopicPartitionOffset("p.n.tasks", partition, 10 + partition, metadata)


@given(st.lists(st.integers(0, 10**9), min_size=1, max_size=8), st.text(max_size=40))
def test_highest_step_of_any_partition_is_resumed(steps: list[int], explorer: str) -> None:
    committed = [at(i, progress_metadata(s, explorer)) for i, s in enumerate(steps)]
    assert resumed_step(committed) == max(steps)
    assert len(progress_metadata(max(steps), explorer).encode()) < 4096


def test_no_commits_or_empty_metadata_resume_at_zero() -> None:
    assert resumed_step([]) == 0
    assert resumed_step([at(0, ""), at(1, "")]) == 0


def test_foreign_metadata_is_skipped_with_the_partition_named(caplog) -> None:
    committed = [
        at(0, "not json"),
        at(1, '{"step": -3}'),
        at(2, '{"step": true}'),
        at(3, '{"other": 1}'),
        at(4, progress_metadata(7, "e")),
    ]
    with caplog.at_level(logging.WARNING):
        assert resumed_step(committed) == 7
    for partition in range(4):
        assert f"p.n.tasks[{partition}]@{10 + partition}" in caplog.text
