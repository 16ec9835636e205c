"""WeightFollower: an explorer's view of the `weights` topic, and the loading of announced versions.

Every explorer reads every WeightVersion (its own consumer group, never committed, read from the
start) and keeps the newest announcement. Loading downloads the version from the checkpoint store
into memory, hashing each file as it arrives and checking its size and sha256 against the
manifest, and loads the weights into the engine from the downloaded buffers (no local file), or
for a LoRA version puts the adapter on the engine's base model (after checking the manifest's base
fingerprint against the engine's); a
version that is incomplete or corrupt is refused with the reason logged, and the engine keeps
the weights it has. Each load is
an `explorer.load_weights` span linked to the trainer's `trainer.announce` span of that version
(from the WeightVersion's Kafka headers). A record on the topic that is not an event (corrupt
bytes, an unknown schema fingerprint) is parked in the dead-letter topic when one is given, and
the follower reads on; its group never commits, so a restarted follower parks it again (the
letters name the same topic, partition and offset).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Status, StatusCode

from rft.config.connections import KafkaSettings
from rft.engines.lora import AdapterVersion, is_adapter
from rft.engines.rollout import RolloutEngine
from rft.engines.weights import tensors_of_files
from rft.errors import CheckpointError, EngineError
from rft.events.models import WeightVersion
from rft.events.reader import EventReader, Resume
from rft.storage.checkpoint_store import TRAINER_STATE_DIR, CheckpointStore
from rft.tracing.spans import LOAD_WEIGHTS, link_to, new_trace

log = logging.getLogger(__name__)
tracer = trace.get_tracer("rft.explorer")


def load_version(engine: RolloutEngine, checkpoints: CheckpointStore, version: int) -> None:
    """Download `version` into memory (every file's size and sha256 verified as it arrives, the
    trainer state left out) and load it into `engine` from those buffers; CheckpointError if
    it is refused."""
    manifest, files = checkpoints.read_files(version, skip_prefixes=(TRAINER_STATE_DIR,))
    source = checkpoints.uri(version)
    try:
        tensors = tensors_of_files(files, source)
        if is_adapter(manifest.extra):
            # a LoRA version: the adapter goes on the base, whose fingerprint it must match
            adapter = AdapterVersion.of_files(manifest.extra, files, tensors, source)
            engine.load_adapter(adapter, version)
            return
    except EngineError as exc:
        raise CheckpointError(f"checkpoint v{version}: {exc}") from exc
    engine.load_state_dict(tensors, version)


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
    ) -> None:
        self.checkpoints = checkpoints
        self.latest: WeightVersion | None = None
        self.refused: dict[int, str] = {}  # version -> why it was not loaded
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

    def wait_for(self, min_version: int, timeout_s: float) -> WeightVersion | None:
        """Poll until a version >= `min_version` is announced, or `timeout_s` passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            latest = self.poll(timeout_s=0.5)
            if latest is not None and latest.version >= min_version:
                return latest
            if time.monotonic() >= deadline:
                return latest

    def load_newest(self, engine: RolloutEngine) -> bool:
        """Load the newest announced version into `engine` if it is newer; True if loaded."""
        latest = self.latest
        if latest is None or latest.version <= engine.model_version:
            return False
        if latest.version in self.refused:
            return False
        return self.load(engine, latest.version)

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
            try:
                load_version(engine, self.checkpoints, version)
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
        log.info("loaded weight version %d in %.1fs", version, time.monotonic() - started)
        return True

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> WeightFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
