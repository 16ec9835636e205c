"""RunCheck: a run's log and checkpoint store read end to end, and every anomaly counted.

After a run (with or without faults) the checker reads, as a throwaway group that commits
nothing, every committed event of the run's `tasks`, experience, `weights` and `dead-letter`
topics, the explorer group's committed task offsets, and every manifest in the checkpoint store.
It writes nothing.

What counts as trained: the chain of versions from the newest manifest back through
`parent_version`. Each version's saved state (`trainer_state/sampler.json`, sha256-verified)
holds its `trained_log`: the experience offsets the steps after its parent trained, how many
times, and the offsets they settled (consumers.trainer_loop). Steps a killed trainer lost are
not in the chain; their redo is. A version that is not on the chain is a fork (two writers).

Facts (reported, not judged): tasks published, experiences committed, experiences trained,
dropped (settled without training: stale or filtered), not reached (past the newest version's
consumed offsets and not settled: the run ended first), tasks not reached (past the explorer
group's committed offset), versions, dead letters by source topic, stored objects that fail
verification now.

Anomalies (each must be 0):

- `experiences lost`: committed, below the newest version's consumed offsets (or settled ahead
  of them), and neither trained nor settled on the chain;
- `experiences trained twice`: trained more than once on the chain, with replay off;
- `tasks never explored`: below the explorer group's committed offset with no committed
  experience and no dead letter naming them;
- `tasks explored twice`: more than one rollout group of a task committed by one explorer group;
- `versions announced without a verified manifest`: a WeightVersion whose manifest is missing
  in the store or lists other files, sizes or checksums than the announcement;
- `versions never announced`: on the chain but never announced (explorers waiting for it would
  wait forever);
- `versions off the chain`: manifests that are not ancestors of the newest one (forks);
- `corrupt weights loaded`: experiences generated on a version that was never announced with a
  verified manifest, or on one whose objects were tampered with (`tampered`, given by a fault
  injector that knows when) after the tampering.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from consumers.topic_range import RangeReader
from rft.buffer.offset_ledger import from_ranges
from rft.config.connections import KafkaSettings
from rft.errors import CheckpointError
from rft.events.models import DeadLetter, Experience, Task, WeightVersion
from rft.events.reader import Envelope
from rft.events.topics import TopicNames
from rft.events.transport import kafka_backend
from rft.storage.checkpoint_manifest import CheckpointManifest
from rft.storage.checkpoint_store import CheckpointStore

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
    """The newest version and its ancestors, newest first, with each one's trained log."""

    versions: list[int]
    manifests: dict[int, CheckpointManifest]
    logs: dict[int, Mapping[str, Any]]


def _positions(entries: Sequence[Sequence[Any]]) -> Iterator[Position]:
    for topic, partition, ranges in entries:
        for offset in from_ranges(ranges):
            yield str(topic), int(partition), offset


class RunChecker:
    """Reads one run (`topics`, `experience_topic`, `explorer_group`, `store`) and judges it."""

    def __init__(
        self,
        kafka: KafkaSettings,
        topics: TopicNames,
        experience_topic: str,
        explorer_group: str,
        store: CheckpointStore,
        *,
        replay: bool = False,
    ) -> None:
        self.kafka = kafka
        self.topics = topics
        self.experience_topic = experience_topic
        self.explorer_group = explorer_group
        self.store = store
        self.replay = replay

    def check(self, tampered: Mapping[int, int] | None = None) -> RunCheck:
        """`tampered`: version -> ms since the epoch when a fault injector changed its objects."""
        report = RunCheck()
        tasks, bad_tasks = read_topic(self.kafka, self.topics.tasks)
        experiences, bad_experiences = read_topic(self.kafka, self.experience_topic)
        announced, bad_weights = read_topic(self.kafka, self.topics.weights)
        dead, bad_dead = read_topic(self.kafka, self.topics.dead_letter)
        chain = self._chain(report)
        verified = self._announced(report, announced, chain)
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

    def _chain(self, report: RunCheck) -> Chain:
        manifests: dict[int, CheckpointManifest] = {}
        for version in self.store.list_versions():
            try:
                manifests[version] = self.store.read_manifest(version)
            except CheckpointError as exc:
                report.notes.append(f"v{version}: manifest unreadable: {exc}")
        versions: list[int] = []
        current = max(manifests, default=0)
        while current and current in manifests:
            versions.append(current)
            current = manifests[current].parent_version or 0
        if current:
            report.notes.append(f"the chain stops at v{current}: its manifest is gone (pruned?)")
        for version in sorted(set(manifests) - set(versions)):
            report.flag(
                "versions off the chain",
                f"v{version} (parent v{manifests[version].parent_version}) is not an ancestor "
                f"of the newest v{versions[0] if versions else 0}",
            )
        logs: dict[int, Mapping[str, Any]] = {}
        corrupt_at_rest = 0
        for version in sorted(manifests):
            with tempfile.TemporaryDirectory(prefix="rft-check-") as tmp:
                try:
                    self.store.download(version, Path(tmp) / "v")
                except CheckpointError as exc:
                    corrupt_at_rest += 1
                    report.notes.append(f"v{version} fails verification now: {exc}")
            if version in versions:
                entry = self._trained_log(manifests[version])
                if entry:
                    logs[version] = entry
        report.facts["versions in the store"] = len(manifests)
        report.facts["versions on the chain"] = len(versions)
        report.facts["stored versions failing verification now"] = corrupt_at_rest
        return Chain(versions, manifests, logs)

    def _trained_log(self, manifest: CheckpointManifest) -> Mapping[str, Any]:
        """The version's trained log and settled-ahead offsets, from its sampler state alone
        (sha256-verified), so a flipped byte in its weights does not hide what it trained."""
        name = manifest.extra.get("sampler_state")
        if not name:
            return {}
        others = tuple(f.name for f in manifest.files if f.name != name)
        with tempfile.TemporaryDirectory(prefix="rft-check-") as tmp:
            try:
                path = self.store.download(manifest.version, Path(tmp) / "s", skip_prefixes=others)
            except CheckpointError:
                return {}
            state = json.loads((path / name).read_text())
        entry = dict(state.get("trained_log") or {})
        if entry:
            entry["settled_ahead"] = state.get("settled_ahead", [])
        return entry

    def _announced(
        self, report: RunCheck, announced: list[Envelope], chain: Chain
    ) -> dict[int, int]:
        """Check each announcement against its manifest; version -> when it was announced."""
        verified: dict[int, int] = {}
        events = [e.event for e in announced if isinstance(e.event, WeightVersion)]
        distinct = {e.version for e in events}
        report.facts["versions announced"] = len(distinct)
        report.facts["  announced again (by a restarted trainer)"] = len(events) - len(distinct)
        for version in sorted(set(chain.versions) - distinct):
            report.flag("versions never announced", f"v{version} is on the chain")
        for event in events:
            manifest = chain.manifests.get(event.version)
            if manifest is None:
                report.flag(
                    "versions announced without a verified manifest",
                    f"v{event.version}: no manifest in the store",
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
        committed = {
            (e.topic, e.partition, e.offset) for e in experiences if isinstance(e.event, Experience)
        }
        report.facts["experiences committed"] = len(committed)
        trained: Counter[Position] = Counter()
        settled: set[Position] = set()
        missing_logs = [v for v in chain.versions if v not in chain.logs]
        for version in chain.versions:
            entry = chain.logs.get(version, {})
            trained.update(_positions(entry.get("trained", [])))
            for topic, partition, offset, times in entry.get("retrained", []):
                trained[(str(topic), int(partition), int(offset))] += int(times) - 1
            settled.update(_positions(entry.get("settled", [])))
        if missing_logs:
            report.notes.append(
                "versions without a trained log (written before it existed, or unverifiable): "
                + ", ".join(f"v{v}" for v in sorted(missing_logs))
            )
        # what the newest version says the trainer is done with
        newest = chain.manifests.get(chain.versions[0]) if chain.versions else None
        consumed = {
            (o.topic, o.partition): o.offset for o in (newest.consumed_offsets if newest else ())
        }
        ahead: set[Position] = set()
        if newest is not None and chain.versions[0] in chain.logs:
            ahead = set(_positions(chain.logs[chain.versions[0]].get("settled_ahead", [])))
        done = {p for p in committed if p[2] < consumed.get((p[0], p[1]), 0)} | (ahead & committed)
        report.facts["experiences trained"] = sum(1 for p in committed if trained[p])
        report.facts["experiences dropped (stale or filtered)"] = len(
            {p for p in settled - set(trained) if p in committed}
        )
        report.facts["experiences not reached by the trainer"] = len(
            committed - done - set(trained)
        )
        for p in sorted(done):
            if not trained[p] and p not in settled:
                report.flag("experiences lost", f"{p[0]}[{p[1]}]@{p[2]}")
        for p, n in sorted(trained.items()):
            if p not in committed:
                report.flag(
                    "experiences trained twice",  # trained but not a committed experience
                    f"{p[0]}[{p[1]}]@{p[2]} trained {n}x but is no committed experience",
                )
            elif n > 1 and not self.replay:
                report.flag("experiences trained twice", f"{p[0]}[{p[1]}]@{p[2]} trained {n}x")
        if self.replay:
            report.notes.append("replay is on: trained twice is not judged against its limits yet")

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
