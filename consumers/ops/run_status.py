"""RunStatus: where a run stands, read from Kafka and the checkpoint store; nothing is written.

- topics: the run's topics (and its experience buffer's, and every other topic named
  `<project>.<name>.*`, such as a shadow explorer's `experiences.<explorer name>`) with their end
  offsets;
- consumer groups: every group whose id starts with `<project>.<name>.`, its state, members and,
  per partition it committed, the committed offset, the end offset and the lag between them;
- the trainer: the newest WeightVersion on the weights topic, the newest verified checkpoint in
  the store, and its last step metric;
- explorers: each live one (its weights follower, group `<run>.weights.<explorer id>`, has
  members) with its explorer group, the version its newest step metric says it holds
  (`model_version_end`; metrics carry the explorer id as a tag), the model version of its newest
  experience in the last `tail` offsets of each experience partition (the trainer's topic and
  any `<run>.experiences.*`), and the step its group last committed for it; and the run's newest
  explorer step metric;
- processes: the newest ComponentStatus of each process on the control topic (in the last
  `tail` offsets of each partition): running, what it waits on (its latest wait line), or how
  it finished;
- dead letters: how many, by error class.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rft.config.connections import KafkaSettings
from rft.consumers.replay.topic_range import RangeReader
from rft.errors import RftError
from rft.events.models import ComponentStatus, DeadLetter, Experience, Metric, WeightVersion
from rft.events.topics import TopicNames
from rft.events.transport import GroupDescription, PartitionBounds, kafka_backend

log = logging.getLogger(__name__)

WEIGHTS_GROUP_ROLE = "weights"  # `<run>.weights.<explorer id>`: one per explorer process
EXPLORER_GROUP_ROLE = "explorer"  # `<run>.explorer.<explorer.name>`: the task-sharing group


@dataclass(frozen=True)
class TopicEnd:
    topic: str
    end_offsets: dict[int, int]  # partition -> offset the next record gets
    held_offsets: int  # offsets the topic holds now: records and transaction markers


@dataclass(frozen=True)
class PartitionLag:
    """A partition of a group: committed offset, end offset and the lag between them (in
    offsets, so transaction markers count). `committed` and `lag` are None for a partition a
    member holds but the group never committed."""

    topic: str
    partition: int
    committed: int | None
    end: int
    lag: int | None
    metadata: str = ""


@dataclass(frozen=True)
class GroupStatus:
    group_id: str
    role: str  # the part after `<run>.`, up to the next dot: explorer, trainer, weights, ...
    state: str
    members: int
    partitions: list[PartitionLag]

    @property
    def lag(self) -> int:
        """Lag summed over the committed partitions."""
        return sum(p.lag for p in self.partitions if p.lag is not None)


@dataclass(frozen=True)
class ExplorerStatus:
    explorer_id: str
    live: bool
    loaded_version: int | None  # model_version of its newest experience read; None: none read
    last_experience_ms: int | None
    step: int | None  # the step its group last committed for it (commit metadata)
    group: str = ""  # its explorer group (consumer group), from its metrics or experiences
    metric_version: int | None = None  # the version its newest step metric says it holds
    metric_step: int | None = None
    experience_topic: str = ""  # where its newest experience was read


@dataclass
class RunStatus:
    run_id: str
    checked_at_ms: int
    topics: list[TopicEnd] = field(default_factory=list)
    groups: list[GroupStatus] = field(default_factory=list)
    trainer_version: int | None = None  # newest WeightVersion announced
    checkpoint_version: int | None = None  # newest manifest in the checkpoint store
    checkpoint_error: str = ""
    trainer_step: int | None = None
    explorers: list[ExplorerStatus] = field(default_factory=list)
    explorer_metric: dict[str, float] = field(default_factory=dict)  # step, model_version, ...
    dead_letters: int = 0
    dead_letters_by_error: dict[str, int] = field(default_factory=dict)
    processes: list[ComponentStatus] = field(default_factory=list)  # newest status of each

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        for group, status in zip(data["groups"], self.groups, strict=True):
            group["lag"] = status.lag
        return json.dumps(data, indent=2, sort_keys=False)


class NewestStatuses:
    """Folds ComponentStatus events into the newest one of each (component, process)."""

    def __init__(self) -> None:
        self.newest: dict[tuple[str, str], ComponentStatus] = {}

    def add(self, status: ComponentStatus) -> None:
        key = (status.component, status.instance)
        seen = self.newest.get(key)
        if seen is None or status.created_at >= seen.created_at:
            self.newest[key] = status

    def statuses(self) -> list[ComponentStatus]:
        return [self.newest[k] for k in sorted(self.newest)]


def newest_statuses(kafka: KafkaSettings, control_topic: str) -> list[ComponentStatus]:
    """The newest status of each process on `control_topic`, now."""
    fold = NewestStatuses()
    with RangeReader.open(kafka, [control_topic]) as reader:
        for batch in reader.batches():
            for env in batch:
                if isinstance(env.event, ComponentStatus):
                    fold.add(env.event)
    return fold.statuses()


def group_role(run_id: str, group_id: str) -> str:
    rest = group_id[len(run_id) + 1 :]
    return rest.split(".", 1)[0]


def _lags(
    group: GroupDescription, committed: Sequence[Any], ends: Mapping[tuple[str, int], int]
) -> list[PartitionLag]:
    out = []
    for o in committed:
        end = ends.get((o.topic, o.partition))
        if end is None:
            continue
        out.append(
            PartitionLag(o.topic, o.partition, o.offset, end, max(end - o.offset, 0), o.metadata)
        )
    seen = {(p.topic, p.partition) for p in out}
    held = {tp for m in group.members for tp in m.assignment}
    out += [
        PartitionLag(t, p, None, ends[(t, p)], None)
        for t, p in sorted(held - seen)
        if (t, p) in ends
    ]
    return sorted(out, key=lambda p: (p.topic, p.partition))


def _explorer_steps(groups: Sequence[GroupStatus]) -> dict[str, int]:
    """explorer id -> the highest step its task-sharing group committed for it."""
    steps: dict[str, int] = {}
    for g in groups:
        if g.role != EXPLORER_GROUP_ROLE:
            continue
        for p in g.partitions:
            try:
                meta = json.loads(p.metadata) if p.metadata else {}
                who, step = meta["explorer"], int(meta["step"])
            except (ValueError, KeyError, TypeError):
                continue
            steps[who] = max(step, steps.get(who, 0))
    return steps


def _tail_spans(
    bounds: Sequence[PartitionBounds], tail: int
) -> dict[tuple[str, int], tuple[int, int]]:
    return {(b.topic, b.partition): (max(b.low, b.high - tail), b.high) for b in bounds}


def read_run_status(
    kafka: KafkaSettings,
    topics: TopicNames,
    experience_topic: str | None = None,
    *,
    checkpoint_store: Any = None,
    tail: int = 500,
    dead_letter_limit: int = 10_000,
) -> RunStatus:
    """The run's status now. `tail` bounds the offsets read from the end of each experience,
    metrics and weights partition; `dead_letter_limit` the dead letters read for the counts by
    error (the total is always exact)."""
    run_id = topics.tasks.rsplit(".", 1)[0]
    status = RunStatus(run_id=run_id, checked_at_ms=int(time.time() * 1000))
    wanted = list(dict.fromkeys([*topics.all(), *([experience_topic] if experience_topic else [])]))
    with kafka_backend(kafka).admin() as admin:
        existing = set(admin.list_topics())
        # topics of the run beyond the standard ones: a shadow explorer's own experience topic
        wanted += sorted(t for t in existing if t.startswith(f"{run_id}.") and t not in wanted)
        present = [t for t in wanted if t in existing]
        bounds = admin.partition_bounds(present) if present else []
        groups = [g for g in admin.list_groups() if g.startswith(f"{run_id}.")]
        described: list[GroupDescription] = admin.describe_groups(groups)
        committed = {g: admin.group_offsets(g) for g in groups}
        used = {o.topic for c in committed.values() for o in c}
        used |= {t for d in described for m in d.members for t, _ in m.assignment}
        extra = sorted(used - set(present) & existing)
        bounds += admin.partition_bounds(extra) if extra else []
    ends = {(b.topic, b.partition): b.high for b in bounds}
    for topic in present:
        mine = [b for b in bounds if b.topic == topic]
        status.topics.append(
            TopicEnd(topic, {b.partition: b.high for b in mine}, sum(b.high - b.low for b in mine))
        )
    for d in described:
        status.groups.append(
            GroupStatus(
                d.group_id,
                group_role(run_id, d.group_id),
                d.state,
                len(d.members),
                _lags(d, committed[d.group_id], ends),
            )
        )
    exp_topic = experience_topic or topics.experiences
    by_topic = {t: [b for b in bounds if b.topic == t] for t in present}
    exp_topics = [exp_topic] + [t for t in present if t.startswith(f"{topics.experiences}.")]
    spans = _tail_spans(
        [
            b
            for t in (*exp_topics, topics.metrics, topics.weights, topics.control)
            for b in by_topic.get(t, [])
        ],
        tail,
    )
    dead = by_topic.get(topics.dead_letter, [])
    status.dead_letters = sum(b.high - b.low for b in dead)
    spans |= _tail_spans(dead, dead_letter_limit)
    newest: dict[str, Experience] = {}
    newest_topic: dict[str, str] = {}
    by_explorer: dict[str, Metric] = {}  # explorer id -> its newest step metric
    explorer_metric: Metric | None = None
    trainer_metric: Metric | None = None
    errors: Counter[str] = Counter()
    processes = NewestStatuses()
    if any(end > start for start, end in spans.values()):
        with RangeReader.for_spans(kafka, spans) as reader:
            for batch in reader.batches():
                for env in batch:
                    ev = env.event
                    if isinstance(ev, Experience):
                        seen = newest.get(ev.explorer_id)
                        if seen is None or ev.created_at >= seen.created_at:
                            newest[ev.explorer_id] = ev
                            newest_topic[ev.explorer_id] = env.topic
                    elif isinstance(ev, ComponentStatus):
                        processes.add(ev)
                    elif isinstance(ev, WeightVersion):
                        status.trainer_version = max(status.trainer_version or 0, ev.version)
                    elif isinstance(ev, DeadLetter):
                        errors[ev.error_class] += 1
                    elif isinstance(ev, Metric) and ev.component == "explorer":
                        if (
                            "model_version" in ev.values
                            and "tasks" in ev.values
                            and (
                                explorer_metric is None or ev.timestamp >= explorer_metric.timestamp
                            )
                        ):
                            explorer_metric = ev
                        who = ev.tags.get("explorer_id")
                        seen_metric = by_explorer.get(who) if who else None
                        if (
                            who
                            and "tasks" in ev.values
                            and (seen_metric is None or ev.timestamp >= seen_metric.timestamp)
                        ):
                            by_explorer[who] = ev
                    elif (
                        isinstance(ev, Metric)
                        and ev.component == "trainer"
                        and (trainer_metric is None or ev.timestamp >= trainer_metric.timestamp)
                    ):
                        trainer_metric = ev
    status.dead_letters_by_error = dict(errors.most_common())
    status.processes = processes.statuses()
    if explorer_metric is not None:
        status.explorer_metric = {
            "step": float(explorer_metric.step),
            "model_version": explorer_metric.values["model_version"],
            "timestamp_ms": float(explorer_metric.timestamp),
        }
    if trainer_metric is not None:
        status.trainer_step = trainer_metric.step
    live = {
        g.group_id[len(f"{run_id}.{WEIGHTS_GROUP_ROLE}.") :]
        for g in status.groups
        if g.role == WEIGHTS_GROUP_ROLE and g.members > 0
    }
    steps = _explorer_steps(status.groups)
    for explorer_id in sorted(live | set(newest) | set(steps) | set(by_explorer)):
        exp = newest.get(explorer_id)
        metric = by_explorer.get(explorer_id)
        held = None
        if metric is not None:
            held = metric.values.get("model_version_end", metric.values.get("model_version"))
        status.explorers.append(
            ExplorerStatus(
                explorer_id,
                explorer_id in live,
                exp.model_version if exp else None,
                exp.created_at if exp else None,
                steps.get(explorer_id),
                group=(metric.tags.get("explorer_group", "") if metric else "")
                or (exp.explorer_group if exp else ""),
                metric_version=None if held is None else int(held),
                metric_step=metric.step if metric else None,
                experience_topic=newest_topic.get(explorer_id, ""),
            )
        )
    if checkpoint_store is not None:
        try:
            status.checkpoint_version = checkpoint_store.latest_version()
        except RftError as exc:
            status.checkpoint_error = str(exc)
    return status


def _ago(now_ms: int, then_ms: float | None) -> str:
    if then_ms is None:
        return "-"
    seconds = max(now_ms - then_ms, 0) / 1000
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def format_status(status: RunStatus, *, all_explorers: bool = False) -> list[str]:
    """The status as lines for a terminal."""
    now = status.checked_at_ms
    out = [f"run {status.run_id}"]
    store = (
        f"checkpoint store v{status.checkpoint_version}"
        if status.checkpoint_version is not None
        else f"checkpoint store: {status.checkpoint_error or 'not read'}"
    )
    announced = "none announced" if status.trainer_version is None else f"v{status.trainer_version}"
    step = "-" if status.trainer_step is None else str(status.trainer_step)
    out.append(f"trainer: latest version {announced} ({store}); last step metric: step {step}")
    shown = [e for e in status.explorers if e.live or all_explorers]
    hidden = len(status.explorers) - len(shown)
    out.append(
        f"explorers: {sum(e.live for e in status.explorers)} live"
        + (f" ({hidden} gone, --all-explorers lists them)" if hidden else "")
    )
    for e in shown:
        held = e.metric_version if e.metric_version is not None else e.loaded_version
        version = "?" if held is None else f"v{held}"
        group = e.group.rsplit(".", 1)[-1] if e.group else "?"
        out.append(
            f"  {e.explorer_id:<36} {'live' if e.live else 'gone':<5} group {group:<12} "
            f"holds {version:<5} step {'-' if e.step is None else e.step:<6} last experience "
            f"{_ago(now, e.last_experience_ms)}"
            + (f" in {e.experience_topic}" if e.experience_topic else "")
        )
    if status.explorer_metric:
        m = status.explorer_metric
        out.append(
            f"  newest explorer step metric: step {m['step']:.0f}, model_version "
            f"{m['model_version']:.0f} ({_ago(now, m['timestamp_ms'])})"
        )
    if status.processes:
        out.append("processes (newest status on the control topic):")
    for proc in status.processes:
        said = proc.detail or proc.state
        out.append(
            f"  {proc.component} {proc.instance}: {proc.state}"
            + (f" ({proc.reason})" if proc.reason else "")
            + f", step {proc.step} of {proc.total_steps} ({_ago(now, proc.created_at)}): {said}"
        )
    errors = ", ".join(f"{k}: {v}" for k, v in status.dead_letters_by_error.items())
    out.append(f"dead letters: {status.dead_letters}" + (f" ({errors})" if errors else ""))
    out.append("topics (end offset per partition):")
    for t in status.topics:
        ends = " ".join(f"{p}:{o}" for p, o in sorted(t.end_offsets.items()))
        out.append(f"  {t.topic:<44} {t.held_offsets:>9,} offsets   {ends}")
    out.append("consumer groups (committed / end = lag, per partition):")
    for g in status.groups:
        out.append(f"  {g.group_id}  {g.state}, {g.members} member(s), lag {g.lag:,}")
        for p in g.partitions:
            if p.committed is None:
                out.append(f"    {p.topic}[{p.partition}] not committed / {p.end}")
            else:
                out.append(f"    {p.topic}[{p.partition}] {p.committed} / {p.end} = {p.lag}")
        if not g.partitions:
            out.append("    (no committed offsets)")
    return out
