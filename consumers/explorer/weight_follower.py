"""WeightFollower: an explorer's view of the `weights` topic, and the loading of announced versions.

Every explorer reads every WeightVersion (its own consumer group, never committed, read from the
start) and keeps the newest announcement. Loading downloads the version from the checkpoint store
into memory, hashing each file as it arrives and checking its size and sha256 against the
manifest, and loads the weights into the engine from the downloaded buffers (no local file), or
for a LoRA version puts the adapter on the engine's base model (after checking the manifest's base
fingerprint against the engine's); a
version that is incomplete or corrupt is refused with the reason logged, and the engine keeps
the weights it has. Once a version is loaded, the next one is prefetched: its files are fetched
into the kept buffers as the trainer puts them up (rft.storage.checkpoint_prefetch), and its load
takes those the manifest vouches for (object key, size, sha256) instead of downloading them
after the announcement. Each load is
an `explorer.load_weights` span linked to the trainer's `trainer.announce` span of that version
(from the WeightVersion's Kafka headers). A record on the topic that is not an event (corrupt
bytes, an unknown schema fingerprint) is parked in the dead-letter topic when one is given, and
the follower reads on; its group never commits, so a restarted follower parks it again (the
letters name the same topic, partition and offset).

With a weight-sync group (`synchronizer.sync_method: nccl` or `memory`; which transport brought
the weights makes no difference here) the follower also holds the explorer's member of it
(rft.synchronizer.weight_group): a version received over the group may be loaded
before it is announced, and is then *unconfirmed*. The log's promise stays exact through
`confirm`: a step that sampled with an unconfirmed version commits only once that version is
announced and its manifest carries the token the weights came with; a manifest that is missing
or holds another token (a trainer died after the broadcast and its successor wrote that version
number again) makes the step's tasks run again on weights loaded from the store (`fall_back`).
A restarted explorer starts from the store (`load_newest(..., from_group=False)`), and one that
missed a broadcast (it joined late, or its group broke) loads announced versions from the store
as without a group.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from rft.config.connections import KafkaSettings
from rft.consumers.explorer.weight_buffers import WeightBuffers
from rft.engines.lora import AdapterVersion, is_adapter
from rft.engines.rollout import RolloutEngine
from rft.engines.weights import tensors_of_files
from rft.errors import CheckpointError, EngineError
from rft.events.models import WeightVersion
from rft.events.reader import EventReader, Resume
from rft.storage.checkpoint_prefetch import VersionPrefetch
from rft.storage.checkpoint_store import TRAINER_STATE_DIR, CheckpointStore, PrefetchedFile
from rft.synchronizer.fast_path import FAST_TOKEN
from rft.synchronizer.weight_group import WeightGroupMember
from rft.tracing.otel import Context, Status, StatusCode, trace
from rft.tracing.spans import LOAD_WEIGHTS, link_to, new_trace

log = logging.getLogger(__name__)
tracer = trace.get_tracer("rft.explorer")


def load_version(
    engine: RolloutEngine,
    checkpoints: CheckpointStore,
    version: int,
    buffers: WeightBuffers | None = None,
    prefetched: Mapping[str, PrefetchedFile] | None = None,
) -> int:
    """Download `version` into memory (every file's size and sha256 verified as it arrives, the
    trainer state left out; weight files into `buffers`' kept ones when given) and load it into
    `engine` from those buffers; CheckpointError if it is refused. Files of `prefetched` that
    the manifest vouches for are not downloaded again; how many of those were taken."""
    complete = False
    try:
        manifest, files = checkpoints.read_files(
            version, skip_prefixes=(TRAINER_STATE_DIR,), into=buffers, prefetched=prefetched
        )
        complete = True
    finally:
        if buffers is not None:
            buffers.settle(complete)
    early = prefetched or {}
    taken = sum(1 for name, data in files.items() if name in early and data is early[name].data)
    source = checkpoints.uri(version)
    try:
        tensors = tensors_of_files(files, source)
        if is_adapter(manifest.extra):
            # a LoRA version: the adapter goes on the base, whose fingerprint it must match
            adapter = AdapterVersion.of_files(manifest.extra, files, tensors, source)
            engine.load_adapter(adapter, version)
            return taken
    except EngineError as exc:
        raise CheckpointError(f"checkpoint v{version}: {exc}") from exc
    engine.load_state_dict(tensors, version)
    return taken


class WeightFollower:
    def __init__(
        self,
        kafka: KafkaSettings,
        weights_topic: str,
        group_id: str,
        checkpoints: CheckpointStore,
        consumer_config: Mapping[str, Any] | None = None,
        explorer_id: str = "",
        dead_letter_topic: str | None = None,
        fast: WeightGroupMember | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        self.fast = fast  # this explorer's member of the weight-sync group, if there is one
        self.unconfirmed: dict[int, int] = {}  # version loaded from the group -> its token
        self.fast_loads = 0
        self.latest: WeightVersion | None = None
        self.refused: dict[int, str] = {}  # version -> why it was not loaded
        self._buffers: WeightBuffers | None = None  # made at the first load, for its engine
        # the next version's files, fetched while the trainer puts them up (store path only)
        self._prefetch: VersionPrefetch | None = None
        self.prefetched_files = 0  # files loaded from a prefetch rather than downloaded after
        self.explorer_id = explorer_id
        # the newest version's announcement context (its trainer.announce span), for links
        self._announced: tuple[int, Context] | None = None
        self._reader = EventReader.open(
            kafka,
            group_id,
            [weights_topic],
            from_beginning=True,
            dead_letter_topic=dead_letter_topic,
            config=consumer_config,
            resume=Resume.CONTINUE,  # it never commits: the group's offset knows nothing
        )

    @property
    def parked(self) -> int:
        """Undecodable announcements this follower parked in the dead-letter topic."""
        return self._reader.parked_count

    def poll(self, timeout_s: float = 0.0) -> WeightVersion | None:
        """Read announcements that arrived; return the newest known one."""
        for env in self._reader.poll(100, timeout_s):
            event = env.event
            if not isinstance(event, WeightVersion):
                log.warning(
                    "%s[%d]@%d: not a WeightVersion (%s), ignored",
                    env.topic,
                    env.partition,
                    env.offset,
                    type(event).__name__,
                )
                continue
            if self.latest is None or event.version > self.latest.version:
                self.latest = event
                self._announced = (event.version, env.trace_context)
        return self.latest

    def newest_available(self) -> int:
        """The newest version this explorer could load now: announced, or received over the
        weight-sync group (0: none)."""
        announced = 0 if self.latest is None else self.latest.version
        received = 0 if self.fast is None else self.fast.peek_version()
        return max(announced, received)

    def wait_for(self, min_version: int, timeout_s: float) -> int:
        """Poll until a version >= `min_version` is available (announced, or received over the
        group), or `timeout_s` passes; the newest available version."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll(timeout_s=0.05 if self.fast is not None else 0.5)
            newest = self.newest_available()
            if newest >= min_version or time.monotonic() >= deadline:
                return newest

    def load_newest(self, engine: RolloutEngine, *, from_group: bool = True) -> bool:
        """Load the newest version into `engine` if it is newer: one received over the group
        when it is at least as new as the newest announced (and `from_group`), else the newest
        announced from the store; True if loaded."""
        received = self.fast.take() if self.fast is not None and from_group else None
        latest = self.latest
        announced = 0 if latest is None else latest.version
        if received is not None and received.version > max(engine.model_version, announced - 1):
            engine.load_state_dict(received.tensors, received.version)
            self.unconfirmed[received.version] = received.token
            self.fast_loads += 1
            log.info("loaded weight version %d from the weight-sync group", received.version)
            return True
        if latest is None or latest.version <= engine.model_version:
            return False
        if latest.version in self.refused:
            return False
        return self.load(engine, latest.version)

    def confirm(self, versions: set[int], timeout_s: float) -> str | None:
        """Wait until each of `versions` loaded from the group is durable: announced, with a
        manifest that holds the token the weights came with. None when all are (or none came
        from the group); else why not, and the step that sampled with them must not commit."""
        # versions older than the step's oldest were replaced before any step sampled with them
        oldest = min(versions, default=0)
        for stale in [v for v in self.unconfirmed if v < oldest]:
            del self.unconfirmed[stale]
        for version in sorted(v for v in versions if v in self.unconfirmed):
            deadline = time.monotonic() + timeout_s
            while self.latest is None or self.latest.version < version:
                if time.monotonic() >= deadline:
                    return (
                        f"weight version {version}, received over the weight-sync group, was not "
                        f"announced within {timeout_s:.0f}s (synchronizer.sync_timeout)"
                    )
                self.poll(timeout_s=0.5)
            if not self.checkpoints.has_manifest(version):
                return f"weight version {version} has no manifest in the store"
            stored = self.checkpoints.read_manifest(version).extra.get(FAST_TOKEN)
            token = self.unconfirmed.pop(version)
            if stored != str(token):
                return (
                    f"weight version {version} in the store ({self.checkpoints.uri(version)}) "
                    "is not the one received over the weight-sync group (another token: a "
                    "trainer wrote that version again)"
                )
        return None

    def fall_back(self, engine: RolloutEngine) -> None:
        """Replace weights received over the group that did not become durable by the newest
        announced version, from the store."""
        self.unconfirmed.clear()
        latest = self.latest
        if latest is not None and latest.version not in self.refused:
            self.load(engine, latest.version)

    def load(self, engine: RolloutEngine, version: int) -> bool:
        started = time.monotonic()
        announced = self._announced
        link = link_to(announced[1]) if announced and announced[0] == version else None
        # this explorer's own span, linked to the trainer's announcement of the version
        with tracer.start_as_current_span(
            LOAD_WEIGHTS, context=new_trace(), links=[link] if link else None
        ) as span:
            span.set_attributes(
                {
                    "rft.explorer_id": self.explorer_id,
                    "rft.version": version,
                    "rft.previous_version": engine.model_version,
                }
            )
            if self._buffers is None:
                self._buffers = WeightBuffers(pinned=engine.weights_on_gpu)
            prefetched = self._end_prefetch(version)
            try:
                taken = load_version(engine, self.checkpoints, version, self._buffers, prefetched)
            except CheckpointError as exc:
                self.refused[version] = str(exc)
                span.set_status(Status(StatusCode.ERROR, f"refused: {exc}"))
                log.error(
                    "weight version %d refused, keeping version %d: %s",
                    version,
                    engine.model_version,
                    exc,
                )
                return False
            finally:
                self._begin_prefetch(engine)
            span.set_attribute("rft.prefetched_files", taken)
        self.prefetched_files += taken
        log.info(
            "loaded weight version %d in %.1fs (%d files fetched while they were put up)",
            version,
            time.monotonic() - started,
            taken,
        )
        return True

    def _begin_prefetch(self, engine: RolloutEngine) -> None:
        """Watch for the version after the newest known one, into the buffers this load kept.
        Not with a weight-sync group: its versions come over the group."""
        if self.fast is not None or self._buffers is None:
            return
        announced = 0 if self.latest is None else self.latest.version
        following = max(engine.model_version, announced) + 1
        self._prefetch = VersionPrefetch(self.checkpoints, following, self._buffers.kept)

    def _end_prefetch(self, version: int) -> dict[str, PrefetchedFile]:
        """Stop the prefetch under way; what it fetched when it was of `version`. After this the
        kept buffers are the load's alone."""
        prefetch, self._prefetch = self._prefetch, None
        if prefetch is None:
            return {}
        files = prefetch.stop()
        return files if prefetch.version == version else {}

    def close(self) -> None:
        self._end_prefetch(0)
        if self.fast is not None:
            self.fast.close()
        self._reader.close()

    def __enter__(self) -> WeightFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
