"""RunCheck: a run's log and checkpoint store read end to end, and every anomaly counted.

After a run (with or without faults) the checker reads, as a throwaway group that commits
nothing, every committed event of the run's `tasks`, experience, `weights` and `dead-letter`
topics, the explorer group's committed task offsets, and every manifest in the checkpoint store.
It writes nothing.

What counts as trained: the chain of versions from the newest manifest back through
`parent_version`. Each version's WeightVersion (schema v2) carries its `trained_log`: the
experience offsets the steps after its parent trained, how many times, and the offsets they
settled (rft.consumers.trainer.loop); the same log sits in the version's saved state
(`trainer_state/sampler.json`, sha256-verified), read for a version announced without one.
Retention (`trainer.max_checkpoints_to_keep`) deletes a version's files but never its
announcement, so the chain goes on through a version whose manifest is gone on its announcement
alone. A manifest may be missing only where retention could have removed it: with `keep` set,
once `keep` newer versions exist; such a version counts as pruned (a fact), any other is an
anomaly. Steps a killed trainer lost are not in the chain; their redo is. A version that is not
on the chain is a fork (two writers).

Facts (reported, not judged): tasks published, experiences committed, experiences trained,
trained again by replay (within the replay policy's limits), dropped (settled without training:
stale or filtered), not reached (past the newest version's consumed offsets and not settled: the
run ended first), unprovable (consumed by a version whose trained log is gone: pruned before
announcements carried it), tasks not reached (past the explorer group's committed offset),
versions, pruned versions, dead letters by source topic, stored objects that fail verification
now.

Anomalies (each must be 0):

- `experiences lost`: committed, below the newest version's consumed offsets (or settled ahead
  of them), and neither trained nor settled on the chain;
- `experiences trained twice`: trained more than once on the chain with replay off, or more
  times than the replay policy allows with it on (a group goes back for reuse only with
  `reuse_cooldown_time` set and while `priority_fn` keeps it); or trained and no committed
  experience;
- `tasks never explored`: below the explorer group's committed offset with no committed
  experience and no dead letter naming them;
- `tasks explored twice`: more than one rollout group of a task committed by one explorer group;
- `versions announced without a verified manifest`: a WeightVersion whose manifest lists other
  files, sizes or checksums than the announcement, or is missing in the store while retention
  never removed it;
- `versions never announced`: on the chain but never announced (explorers waiting for it would
  wait forever);
- `versions off the chain`: versions (stored, or announced and pruned) that are not ancestors of
  the newest one (forks);
- `corrupt weights loaded`: experiences generated on a version that was never announced with a
  verified manifest, or on one whose objects were tampered with (`tampered`, given by a fault
  injector that knows when) after the tampering.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rft.buffer.replay_buffer import ReplaySettings, replay_settings
from rft.config.connections import KafkaSettings
from rft.consumers.replay.topic_range import RangeReader
from rft.consumers.run_plan import RunPlan
from rft.errors import CheckpointError
from rft.events.models import (
    DeadLetter,
    Experience,
    OffsetRanges,
    Task,
    TrainedLog,
    WeightVersion,
)
from rft.events.reader import Envelope
from rft.events.topics import TopicNames
from rft.events.transport import kafka_backend
from rft.storage.checkpoint_manifest import CheckpointManifest
from rft.storage.checkpoint_store import CheckpointStore
from rft.storage.trained_log import trained_log_of

log = logging.getLogger(__name__)

Position = tuple[str, int, int]  # topic, partition, offset

ANOMALIES = (
    "experiences lost",
    "experiences trained twice",
    "tasks never explored",
    "tasks explored twice",
    "versions announced without a verified manifest",
    "versions never announced",
    "versions off the chain",
    "corrupt weights loaded",
)
# How many examples of each anomaly the report keeps.
EXAMPLES = 10


@dataclass
class RunCheck:
    """The checker's findings: facts, anomaly counts and a few examples of each anomaly."""

    facts: dict[str, int] = field(default_factory=dict)
    anomalies: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALIES, 0))
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())

    def flag(self, anomaly: str, example: str) -> None:
        self.anomalies[anomaly] += 1
        if len(self.examples[anomaly]) < EXAMPLES:
            self.examples[anomaly].append(example)

    def table(self) -> list[str]:
        """The report as aligned text lines: facts, then anomalies with examples."""
        width = max(len(k) for k in [*self.facts, *self.anomalies])
        out = ["facts:"]
        out += [f"  {k:<{width}}  {v}" for k, v in self.facts.items()]
        out.append("anomalies (each must be 0):")
        for k, v in self.anomalies.items():
            out.append(f"  {k:<{width}}  {v}")
            out += [f"      {e}" for e in self.examples.get(k, [])]
        out += [f"note: {n}" for n in self.notes]
        out.append("result: " + ("OK" if self.ok else "ANOMALIES FOUND"))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "facts": self.facts,
            "anomalies": self.anomalies,
            "examples": dict(self.examples),
            "notes": self.notes,
            "ok": self.ok,
        }


def read_topic(kafka: KafkaSettings, topic: str) -> tuple[list[Envelope], list[str]]:
    """Every committed event of `topic` now (read_committed), and the undecodable records."""
    events: list[Envelope] = []
    with RangeReader.open(kafka, [topic]) as reader:
        for batch in reader.batches():
            events += batch
        return events, list(reader.undecodable)


@dataclass(frozen=True)
class Chain:
    """The newest version and its ancestors, newest first, with each one's trained log.

    `manifests`: every version in the store; `announced`: each announced version's announcement
    (one carrying a trained log when any does); `pruned`: announced versions whose manifest
    retention removed."""

    versions: list[int]
    manifests: dict[int, CheckpointManifest]
    announced: dict[int, WeightVersion]
    pruned: set[int]
    logs: dict[int, TrainedLog]

    def consumed(self, version: int) -> dict[tuple[str, int], int]:
        """What `version` says the trainer is done with: per partition, the next offset."""
        source = self.manifests.get(version) or self.announced.get(version)
        offsets = source.consumed_offsets if source is not None else ()
        return {(o.topic, o.partition): o.offset for o in offsets}


def _positions(entries: Iterable[OffsetRanges]) -> Iterator[Position]:
    for entry in entries:
        for offset in entry.offsets():
            yield entry.topic, entry.partition, offset


class RunChecker:
    """Reads one run (`topics`, `experience_topic`, `explorer_group`, `store`) and judges it.

    `replay`: the replay settings the trainer ran with (None: replay off), the limits "trained
    twice" is judged against. `keep_checkpoints`: `trainer.max_checkpoints_to_keep`, which says
    which versions retention may have pruned (None: none).
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        topics: TopicNames,
        experience_topic: str,
        explorer_group: str,
        store: CheckpointStore,
        *,
        replay: ReplaySettings | None = None,
        keep_checkpoints: int | None = None,
    ) -> None:
        self.kafka = kafka
        self.topics = topics
        self.experience_topic = experience_topic
        self.explorer_group = explorer_group
        self.store = store
        self.replay = replay
        self.keep_checkpoints = keep_checkpoints

    @classmethod
    def of_plan(cls, plan: RunPlan, kafka: KafkaSettings | None = None) -> RunChecker:
        """The checker of `plan`'s run, with its replay settings and retention."""
        cfg = plan.cfg
        return cls(
            kafka or cfg.stack.kafka,
            plan.topics,
            plan.experience_topic,
            plan.explorer_group,
            plan.checkpoint_store(),
            replay=replay_settings(cfg.buffer.trainer_input.experience_buffer),
            keep_checkpoints=cfg.trainer.max_checkpoints_to_keep,
        )

    def check(self, tampered: Mapping[int, int] | None = None) -> RunCheck:
        """`tampered`: version -> ms since the epoch when a fault injector changed its objects."""
        report = RunCheck()
        tasks, bad_tasks = read_topic(self.kafka, self.topics.tasks)
        experiences, bad_experiences = read_topic(self.kafka, self.experience_topic)
        announced, bad_weights = read_topic(self.kafka, self.topics.weights)
        dead, bad_dead = read_topic(self.kafka, self.topics.dead_letter)
        events = [e.event for e in announced if isinstance(e.event, WeightVersion)]
        chain = self._chain(report, events)
        verified = self._announced(report, events, chain)
        self._training(report, experiences, chain)
        self._tasks(report, tasks, experiences, dead)
        self._weights_loaded(report, experiences, verified, tampered or {})
        by_source = Counter(d.event.source_topic for d in dead if isinstance(d.event, DeadLetter))
        report.facts["dead letters"] = sum(by_source.values())
        for topic, n in sorted(by_source.items()):
            report.facts[f"  from {topic}"] = n
        # a consumer that restarts before its parked offset is durable parks the record again
        sources = Counter(
            (d.event.source_topic, d.event.source_partition, d.event.source_offset)
            for d in dead
            if isinstance(d.event, DeadLetter)
        )
        report.facts["  of one source record parked again"] = sum(n - 1 for n in sources.values())
        undecodable = len(bad_tasks) + len(bad_experiences) + len(bad_weights) + len(bad_dead)
        report.facts["undecodable records read by the checker"] = undecodable
        return report

    # -- the checkpoint chain -------------------------------------------------------------------

    def _chain(self, report: RunCheck, events: list[WeightVersion]) -> Chain:
        manifests: dict[int, CheckpointManifest] = {}
        for version in self.store.list_versions():
            try:
                manifests[version] = self.store.read_manifest(version)
            except CheckpointError as exc:
                report.notes.append(f"v{version}: manifest unreadable: {exc}")
        announced: dict[int, WeightVersion] = {}
        for event in events:
            if event.version not in announced or announced[event.version].trained_log is None:
                announced[event.version] = event
        pruned = self._pruned(set(announced) - set(manifests), set(manifests) | set(announced))
        versions: list[int] = []
        current = max(manifests, default=0)
        while current:
            versions.append(current)
            source = manifests.get(current) or announced[current]
            current = source.parent_version or 0
            if current >= versions[-1]:
                report.notes.append(f"v{versions[-1]} names v{current} as its parent")
                break
            if current and current not in manifests and current not in announced:
                report.notes.append(
                    f"the chain stops at v{current}: its manifest is gone and it was never "
                    "announced"
                )
                break
        on_chain = set(versions)
        newest = versions[0] if versions else 0
        for version in sorted((set(manifests) | pruned) - on_chain):
            parent = (manifests.get(version) or announced[version]).parent_version
            report.flag(
                "versions off the chain",
                f"v{version} (parent v{parent}) is not an ancestor of the newest v{newest}",
            )
        logs: dict[int, TrainedLog] = {}
        for version in versions:
            said = announced.get(version)
            if said is not None and said.trained_log is not None:
                logs[version] = said.trained_log
        corrupt_at_rest = 0
        for version in sorted(manifests):
            with tempfile.TemporaryDirectory(prefix="rft-check-") as tmp:
                try:
                    path = self.store.download(version, Path(tmp) / "v")
                except CheckpointError as exc:
                    corrupt_at_rest += 1
                    report.notes.append(f"v{version} fails verification now: {exc}")
                    # its sampler state alone may still verify: a flipped byte in the weights
                    # does not hide what it trained
                    path = None
                if version in on_chain and version not in logs:
                    entry = self._saved_log(manifests[version], path)
                    if entry is not None:
                        logs[version] = entry
        report.facts["versions in the store"] = len(manifests)
        report.facts["versions pruned by retention"] = len(pruned)
        report.facts["versions on the chain"] = len(versions)
        report.facts["stored versions failing verification now"] = corrupt_at_rest
        return Chain(versions, manifests, announced, pruned, logs)

    def _pruned(self, missing: set[int], committed: set[int]) -> set[int]:
        """Those of `missing` (no manifest) that retention may have removed: it keeps the
        newest `keep_checkpoints` versions, so only a version with that many newer ones."""
        if not self.keep_checkpoints:
            return set()
        newer_than = sorted(committed, reverse=True)
        rank = {v: i for i, v in enumerate(newer_than)}  # how many committed versions are newer
        return {v for v in missing if rank[v] >= self.keep_checkpoints}

    def _saved_log(
        self, manifest: CheckpointManifest, downloaded: Path | None
    ) -> TrainedLog | None:
        """The version's trained log from its sampler state (sha256-verified): from the
        verified download when there is one, else downloaded alone."""
        name = manifest.extra.get("sampler_state")
        if not name:
            return None
        if downloaded is not None:
            state = json.loads((downloaded / name).read_text())
        else:
            others = tuple(f.name for f in manifest.files if f.name != name)
            with tempfile.TemporaryDirectory(prefix="rft-check-") as tmp:
                try:
                    path = self.store.download(
                        manifest.version, Path(tmp) / "s", skip_prefixes=others
                    )
                except CheckpointError:
                    return None
                state = json.loads((path / name).read_text())
        return trained_log_of(state)

    def _announced(
        self, report: RunCheck, events: list[WeightVersion], chain: Chain
    ) -> dict[int, int]:
        """Check each announcement against its manifest; version -> when it was announced."""
        verified: dict[int, int] = {}
        distinct = {e.version for e in events}
        report.facts["versions announced"] = len(distinct)
        report.facts["  announced again (by a restarted trainer)"] = len(events) - len(distinct)
        for version in sorted(set(chain.versions) - distinct):
            report.flag("versions never announced", f"v{version} is on the chain")
        for event in events:
            manifest = chain.manifests.get(event.version)
            if manifest is None:
                if event.version in chain.pruned:
                    # compared with its manifest while it lived, by every explorer that loaded it
                    verified.setdefault(event.version, event.created_at)
                    continue
                report.flag(
                    "versions announced without a verified manifest",
                    f"v{event.version}: no manifest in the store, and retention did not remove it",
                )
                continue
            said = sorted((m.name, m.size, m.sha256) for m in event.manifest)
            stored = sorted((f.name, f.size, f.sha256) for f in manifest.files)
            if said != stored:
                report.flag(
                    "versions announced without a verified manifest",
                    f"v{event.version}: the announcement lists other files than its manifest",
                )
                continue
            verified.setdefault(event.version, event.created_at)
        return verified

    # -- experiences ----------------------------------------------------------------------------

    def _training(self, report: RunCheck, experiences: list[Envelope], chain: Chain) -> None:
        committed: dict[Position, Experience] = {
            (e.topic, e.partition, e.offset): e.event
            for e in experiences
            if isinstance(e.event, Experience)
        }
        report.facts["experiences committed"] = len(committed)
        trained: Counter[Position] = Counter()
        settled: set[Position] = set()
        for version in chain.versions:
            entry = chain.logs.get(version)
            if entry is None:
                continue
            trained.update(_positions(entry.trained))
            for r in entry.retrained:
                trained[(r.topic, r.partition, r.offset)] += r.times - 1
            settled.update(_positions(entry.settled))
        missing_logs = [v for v in chain.versions if v not in chain.logs]
        # what a version without a trained log consumed can no longer be proven either way
        unprovable: dict[tuple[str, int], int] = {}
        if missing_logs:
            unprovable = chain.consumed(missing_logs[0])
            report.notes.append(
                "versions without a trained log (announced before announcements carried it, "
                "or unverifiable): " + ", ".join(f"v{v}" for v in sorted(missing_logs))
            )
        # what the newest version says the trainer is done with
        consumed = chain.consumed(chain.versions[0]) if chain.versions else {}
        ahead: set[Position] = set()
        if chain.versions and chain.versions[0] in chain.logs:
            ahead = set(_positions(chain.logs[chain.versions[0]].settled_ahead))
        done = {p for p in committed if p[2] < consumed.get((p[0], p[1]), 0)}
        done |= {p for p in ahead if p in committed}
        report.facts["experiences trained"] = sum(1 for p in committed if trained[p])
        report.facts["experiences dropped (stale or filtered)"] = sum(
            1 for p in settled if p in committed and not trained[p]
        )
        report.facts["experiences not reached by the trainer"] = sum(
            1 for p in committed if p not in done and not trained[p]
        )
        cannot_tell = 0
        for p in sorted(done):
            if trained[p] or p in settled:
                continue
            if p[2] < unprovable.get((p[0], p[1]), 0):
                cannot_tell += 1
            else:
                report.flag("experiences lost", f"{p[0]}[{p[1]}]@{p[2]}")
        report.facts["experiences unprovable (their version's trained log is gone)"] = cannot_tell
        self._trained_again(report, trained, committed)

    def _trained_again(
        self, report: RunCheck, trained: Counter[Position], committed: Mapping[Position, Experience]
    ) -> None:
        """Each experience trained more than once: allowed only as far as the replay policy
        lets its rollout group be reused."""
        replay = self.replay
        oldest: dict[str, int] = {}  # group id -> its oldest member's version (the buffer's)
        if replay is not None:
            for member in committed.values():
                oldest[member.group_id] = min(
                    oldest.get(member.group_id, member.model_version), member.model_version
                )
        replayed = 0
        for p, n in sorted(trained.items()):
            where = f"{p[0]}[{p[1]}]@{p[2]}"
            exp = committed.get(p)
            if exp is None:
                report.flag(
                    "experiences trained twice",  # trained but not a committed experience
                    f"{where} trained {n}x but is no committed experience",
                )
            elif n == 1:
                continue
            elif replay is None:
                report.flag("experiences trained twice", f"{where} trained {n}x")
            elif not replay.allows_uses(oldest[exp.group_id], exp.group_id, n):
                report.flag(
                    "experiences trained twice",
                    f"{where} trained {n}x, more than the replay policy lets its group "
                    f"{exp.group_id} be used",
                )
            else:
                replayed += 1
        report.facts["experiences trained again by replay (within its limits)"] = replayed

    def _tasks(
        self,
        report: RunCheck,
        tasks: list[Envelope],
        experiences: list[Envelope],
        dead: list[Envelope],
    ) -> None:
        committed_offsets: dict[tuple[str, int], int] = {}
        with kafka_backend(self.kafka).admin() as admin:
            for o in admin.group_offsets(self.explorer_group):
                if o.topic == self.topics.tasks:
                    committed_offsets[(o.topic, o.partition)] = o.offset
        groups: dict[str, set[str]] = defaultdict(set)
        for e in experiences:
            exp = e.event
            if isinstance(exp, Experience) and exp.explorer_group in ("", self.explorer_group):
                groups[exp.task_id].add(exp.group_id)
        parked = {
            (d.event.source_partition, d.event.source_offset)
            for d in dead
            if isinstance(d.event, DeadLetter) and d.event.source_topic == self.topics.tasks
        }
        published = [t for t in tasks if isinstance(t.event, Task)]
        report.facts["tasks published"] = len(published)
        not_reached = 0
        for t in published:
            task = t.event
            assert isinstance(task, Task)
            reached = t.offset < committed_offsets.get((t.topic, t.partition), 0)
            if not reached:
                not_reached += 1
                continue
            if task.task_id in groups:
                if len(groups[task.task_id]) > 1:
                    report.flag(
                        "tasks explored twice",
                        f"{task.task_id} ({t.topic}[{t.partition}]@{t.offset}): "
                        f"{len(groups[task.task_id])} rollout groups",
                    )
                continue
            if (t.partition, t.offset) in parked:
                continue  # dead-lettered (its workflow failed): accounted for
            report.flag(
                "tasks never explored", f"{task.task_id} ({t.topic}[{t.partition}]@{t.offset})"
            )
        report.facts["tasks not reached by the explorers"] = not_reached

    def _weights_loaded(
        self,
        report: RunCheck,
        experiences: list[Envelope],
        verified: Mapping[int, int],
        tampered: Mapping[int, int],
    ) -> None:
        for e in experiences:
            exp = e.event
            if not isinstance(exp, Experience) or exp.model_version == 0:
                continue
            where = f"{e.topic}[{e.partition}]@{e.offset}"
            if exp.model_version not in verified:
                report.flag(
                    "corrupt weights loaded",
                    f"{where}: generated on v{exp.model_version}, never announced with a "
                    "verified manifest",
                )
            elif exp.model_version in tampered and exp.created_at > tampered[exp.model_version]:
                report.flag(
                    "corrupt weights loaded",
                    f"{where}: generated on v{exp.model_version} after its objects were changed",
                )
