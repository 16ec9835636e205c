"""Where a multi-stage pipeline stands, kept in the object store beside its stages' checkpoints.

A stage that finished gets one record, `<project>/<name>/stages/<i>-<stage_name>.json`, created
only if absent (so it is written once, whole or not at all): the stage's run and its last weight
version with the sha256 of that version's manifest. A rerun of the pipeline skips the stages that
have a record and starts the next one from the recorded version, checking the manifest against the
recorded hash. The record lives in the object store, not in a local file, so any host sees it.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass

from rft.errors import CheckpointError
from rft.storage.object_store_base import ObjectExistsError, ObjectNotFoundError, ObjectStore

_FORMAT = 1


@dataclass(frozen=True)
class StageRecord:
    """A finished stage: its run's name and the last weight version it published."""

    index: int
    stage_name: str
    run_name: str
    last_version: int
    manifest_sha256: str
    finished_at_ms: int

    def to_json(self) -> bytes:
        return json.dumps({"format": _FORMAT, **asdict(self)}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, source: str) -> StageRecord:
        try:
            raw = json.loads(data)
            return cls(
                index=int(raw["index"]),
                stage_name=str(raw["stage_name"]),
                run_name=str(raw["run_name"]),
                last_version=int(raw["last_version"]),
                manifest_sha256=str(raw["manifest_sha256"]),
                finished_at_ms=int(raw["finished_at_ms"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{source}: not a stage record: {exc}") from exc


def manifest_digest(manifest_bytes: bytes) -> str:
    """The sha256 a record keeps of its version's manifest."""
    return hashlib.sha256(manifest_bytes).hexdigest()


class StageProgress:
    """The finished stages of the pipeline `project`/`name`."""

    def __init__(self, store: ObjectStore, project: str, name: str) -> None:
        self.store = store
        self._prefix = f"{project}/{name}/stages/"

    def _key(self, index: int, stage_name: str) -> str:
        return f"{self._prefix}{index:03d}-{stage_name}.json"

    def uri(self, index: int, stage_name: str) -> str:
        return self.store.uri(self._key(index, stage_name))

    def finished(self, index: int, stage_name: str) -> StageRecord | None:
        """The record of stage `index` if it finished, else None."""
        key = self._key(index, stage_name)
        try:
            data = self.store.get_bytes(key)
        except ObjectNotFoundError:
            return None
        return StageRecord.from_json(data, self.store.uri(key))

    def record(
        self, index: int, stage_name: str, run_name: str, version: int, manifest: bytes
    ) -> StageRecord:
        """Record stage `index` as finished at `version` (whose manifest's bytes are `manifest`).
        A record already there (a pipeline that recorded it and died before going on) must say
        the same version; CheckpointError otherwise."""
        record = StageRecord(
            index, stage_name, run_name, version, manifest_digest(manifest), int(time.time() * 1000)
        )
        key = self._key(index, stage_name)
        try:
            self.store.put_bytes_if_absent(key, record.to_json())
        except ObjectExistsError:
            found = self.finished(index, stage_name)
            assert found is not None
            if (found.last_version, found.manifest_sha256) != (version, record.manifest_sha256):
                raise CheckpointError(
                    f"{self.store.uri(key)} records stage {stage_name!r} finished at "
                    f"v{found.last_version}, but its run's last version is v{version}"
                ) from None
            return found
        return record
