"""The Sampler protocol: how the trainer chooses each batch from the experiences it has read.

A sampler takes experiences in as they are polled (`add`) and hands out one train batch of whole
rollout groups when one is ready (`take_batch`), judged at the trainer's weight version at that
moment. It tells the trainer which experiences it will never hand out again (`release`: trained
and not kept for replay, dropped as stale, filtered, evicted), so the offset ledger can settle
them; everything else stays in flight and a restarted trainer reads it again. `state` / `restore`
carry what the log cannot rebuild (use counts, cooldowns, counters, positions in auxiliary
buffers) as JSON inside every weight version, so a restarted trainer continues exactly.

Samplers are chosen by `algorithm.sample_strategy` from `SAMPLE_STRATEGIES`
(`rft.buffer.sample_strategy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

from rft.events.models import Experience

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Admitted:
    """An experience read from the log, with where it was read (for the offset ledger)."""

    exp: Experience
    tp: TopicPartition
    offset: int

    @property
    def group_id(self) -> str:
        return self.exp.group_id

    @property
    def group_size(self) -> int:
        return self.exp.group_size

    @property
    def key(self) -> tuple[str, int, int]:
        """(topic, partition, offset): the experience's identity in the log."""
        return self.tp[0], self.tp[1], self.offset


@dataclass(frozen=True)
class BatchRow:
    """One row of a train batch.

    source: where a learner row was read (None for expert rows from an auxiliary buffer).
    use_count: how many times this experience has been trained, this time included.
    expert: the row is a demonstration: the trainer applies the SFT loss to it, not the RL one.
    """

    exp: Experience
    source: Admitted | None
    use_count: int = 1
    expert: bool = False


@dataclass
class SamplerCounters:
    """Totals since the run began (kept across restarts), in experiences unless named groups.

    dropped_stale: staler than allowed when their batch was formed.
    filtered_groups / filtered_experiences: groups whose rewards were all equal (group filter).
    evicted: let go by a full replay buffer (the lowest priority), trained or not.
    rejected: not admitted by a full replay buffer whose lowest priority was higher.
    retired: left the replay buffer after their last permitted use.
    replayed_rows: learner rows trained for the second time or more.
    learner_rows / expert_rows: rows trained from the experience topic / auxiliary buffers.
    """

    dropped_stale: int = 0
    filtered_groups: int = 0
    filtered_experiences: int = 0
    evicted: int = 0
    rejected: int = 0
    retired: int = 0
    replayed_rows: int = 0
    learner_rows: int = 0
    expert_rows: int = 0

    def copy(self) -> SamplerCounters:
        return SamplerCounters(**asdict(self))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SamplerCounters:
        known = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in data.items() if k in known})


@dataclass(frozen=True)
class SampledBatch:
    """A batch to train at weight version `version`, and the counters as they stood then."""

    rows: list[BatchRow]
    version: int
    counters: SamplerCounters

    @property
    def learner_rows(self) -> list[BatchRow]:
        return [r for r in self.rows if not r.expert]


class Sampler(Protocol):
    """What the trainer loop needs from a sample strategy."""

    counters: SamplerCounters

    def add(self, item: Admitted) -> None:
        """Take in one experience read from the log."""

    def take_batch(self, version: int) -> SampledBatch | None:
        """A batch of whole groups (staleness judged at `version`), or None if none is ready."""

    def release(self) -> list[Admitted]:
        """Experiences let go since the last call: the ledger may settle them."""

    def waiting(self) -> tuple[int, int]:
        """(experiences in incomplete groups, experiences in complete groups not trained yet)."""

    def state(self) -> dict[str, Any]:
        """JSON-able state to save with a weight version."""

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from `state` (before any `add`); the log supplies the experiences again."""
