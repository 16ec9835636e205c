"""What an offline trainer (`rft train --from-topic`) reads, and the rules it reads by.

An offline trainer has no explorer: it trains on a range of an experience topic that is already
written (this run's or another's), read with `rft.consumers.replay.topic_range` as a throwaway consumer
group that never commits, so no other group's offsets move. The range is resolved to per-partition
`[start, end)` offsets once, when the run starts fresh, and saved with every weight version
(`offline_state`): a resumed run reads the same range to the same end even if the topic has grown
since, and ends when it is exhausted. Its events come in an order fixed by the range's records
(`topic_range`'s partition merge), so two retrains of one range build the same batches and a
resume goes on as the uninterrupted run would have.

Staleness is not judged offline. Online, staleness compares an experience's `model_version` with
the version the trainer is about to train; offline, the logged versions count steps of the run
that generated them, not of this trainer, so a bound on their difference would drop experiences
for no reason tied to the model being trained. `max_staleness` is therefore set aside with a
warning; `--min-version` / `--max-version` pick logged versions instead.

Filters (`rft.consumers.replay.filter`) settle the experiences they leave out. A reward filter can
leave part of a rollout group, which would never complete; algorithms without advantages (`raft`:
the supervised loss on logged responses) then train each kept experience as a group of its own,
and algorithms with group advantages refuse a reward filter.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rft.config.connections import KafkaSettings
from rft.consumers.replay.filter import ExperienceFilter
from rft.consumers.replay.topic_range import Partition, RangeBound, RangeReader, resolve_spans
from rft.errors import ConfigError
from rft.events.models import Experience
from rft.events.reader import Envelope
from rft.events.transport import kafka_backend

log = logging.getLogger(__name__)

# the key of the offline range in the state saved with each weight version
STATE_KEY = "offline"

Admit = Callable[[Experience], Experience | None]


@dataclass(frozen=True)
class OfflineSource:
    """A topic, the range of it to train on, and which of its experiences to keep."""

    topic: str
    start: RangeBound = field(default_factory=RangeBound)
    end: RangeBound = field(default_factory=RangeBound)
    keep: ExperienceFilter = field(default_factory=ExperienceFilter)

    @property
    def filters_reward(self) -> bool:
        return self.keep.min_reward is not None or self.keep.max_reward is not None


def offline_state(topic: str, spans: Mapping[Partition, tuple[int, int]]) -> dict[str, Any]:
    """The range as JSON, to save with a weight version."""
    return {
        "topic": topic,
        "spans": [[t, p, first, end] for (t, p), (first, end) in sorted(spans.items())],
    }


def spans_from_state(state: Mapping[str, Any]) -> dict[Partition, tuple[int, int]]:
    return {(str(t), int(p)): (int(first), int(end)) for t, p, first, end in state["spans"]}


def resolve_range(
    kafka: KafkaSettings, source: OfflineSource, saved: Mapping[str, Any] | None
) -> dict[Partition, tuple[int, int]]:
    """The `[start, end)` offsets to train on: the saved ones when resuming, else `source`'s
    bounds resolved against the topic now.

    `saved` is the state saved with the newest weight version (None on a fresh run). A version
    without an offline range was published by an online trainer, and a range of another topic
    belongs to another retrain: both are refused rather than mixed into this run.
    """
    if saved is not None:
        state = saved.get(STATE_KEY)
        if state is None:
            raise ConfigError(
                "this run's newest weight version was published by an online trainer: give the "
                "offline retrain a run of its own (another `name`), or set "
                "continue_from_checkpoint: false"
            )
        if state["topic"] != source.topic:
            raise ConfigError(
                f"--from-topic {source.topic}: this run's weight versions were trained from "
                f"{state['topic']}; resume with that topic or use another run `name`"
            )
        spans = spans_from_state(state)
        if not (source.start.open and source.end.open):
            log.info("resuming: the saved range is read, the range options are not applied again")
        return spans
    with kafka_backend(kafka).admin() as admin:
        return resolve_spans(admin, [source.topic], source.start, source.end)


def offline_total_steps(
    configured: int | None, spans: Mapping[Partition, tuple[int, int]], train_batch_size: int
) -> int:
    """Steps for the LR schedule and the stop rule: at most one per `train_batch_size` offsets of
    the range (transaction markers take offsets too, so the range usually ends first), and at
    most `configured` (buffer.total_steps / trainer.total_steps) when set."""
    offsets = sum(end - first for first, end in spans.values())
    bound = max(1, math.ceil(offsets / train_batch_size))
    return min(configured, bound) if configured is not None else bound


OFFLINE = (
    "not applied offline: logged model versions count the steps of the run that generated them, "
    "not this trainer's; every experience in the range is trained whatever its version (pick "
    "versions with --min-version/--max-version)"
)
DATASET = (
    "not applied to a dataset's rows: no policy version generated them; every row is trained "
    "whatever the trainer's version"
)


def without_staleness(args: Mapping[str, Any], why: str = OFFLINE) -> dict[str, Any]:
    """Sample strategy args with `max_staleness` set aside, saying `why` (offline: see the module
    docstring; a dataset's rows: `DATASET`)."""
    out = dict(args)
    if out.get("max_staleness") is not None:
        log.warning("max_staleness %s is %s", out["max_staleness"], why)
        out["max_staleness"] = None
    return out


def admit_rule(source: OfflineSource, uses_advantage: bool, algorithm: str) -> Admit | None:
    """What the trainer applies to each experience read (None: keep each as it is)."""
    if source.keep.keeps_all:
        return None
    keep = source.keep
    if not source.filters_reward:
        # version, explorer and task filters keep or drop whole groups (members share them)
        return lambda exp: exp if keep.accepts(exp) else None
    if uses_advantage:
        raise ConfigError(
            f"--min-reward/--max-reward: algorithm {algorithm!r} computes advantages over whole "
            "rollout groups, which a reward filter splits; filter by reward with algorithm_type "
            "raft (the supervised loss on the kept responses), or leave the reward filter out"
        )

    def alone(exp: Experience) -> Experience | None:
        if not keep.accepts(exp):
            return None
        # a group of its own, and a whole trajectory (a kept step of a step-wise one would
        # otherwise wait for steps the filter dropped)
        return dataclasses.replace(
            exp,
            group_id=f"{exp.group_id}/{exp.experience_id}",
            group_size=1,
            trajectory_id="",
            turn=0,
            turn_count=1,
        )

    return alone


class OfflineExperiences:
    """The trainer loop's experience source over a range: polls it, seeks inside it for a resume,
    and commits nothing (the range read never joins the online trainer's group)."""

    def __init__(self, reader: RangeReader) -> None:
        self.reader = reader

    @classmethod
    def open(
        cls,
        kafka: KafkaSettings,
        spans: Mapping[Partition, tuple[int, int]],
        config: Mapping[str, Any] | None = None,
    ) -> OfflineExperiences:
        return cls(RangeReader.for_spans(kafka, spans, config=config))

    def poll(self, max_events: int = 500, timeout_s: float = 1.0) -> list[Envelope]:
        return self.reader.poll(max_events, timeout_s)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self.reader.seek(topic, partition, offset)

    def commit(self) -> None:
        """Nothing to commit: resumes read the offsets saved with the weight version."""

    @property
    def exhausted(self) -> bool:
        return self.reader.exhausted

    def close(self) -> None:
        self.reader.close()
