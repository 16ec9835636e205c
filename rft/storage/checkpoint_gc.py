"""Garbage collection of a checkpoint store: orphaned version directories.

An orphan is a version directory holding files but no manifest: a write that crashed, or one a
fenced trainer abandoned. Readers never see it (a version exists only through its manifest), but
it holds storage. `collect_orphans` removes each orphan whose newest file is older than a TTL;
the TTL is what keeps a write still in progress (which refreshes that time with every file it
uploads) from being collected under its writer. `rft gc` is the command.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

from rft.errors import ConfigError
from rft.storage.checkpoint_manifest import MANIFEST_NAME
from rft.storage.checkpoint_store import CheckpointStore

log = logging.getLogger(__name__)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class Orphan:
    version: int
    uri: str
    files: int
    size: int
    newest_write: float  # seconds since the epoch: when its newest file was written


def parse_duration(text: str) -> float:
    """'90', '90s', '30m', '24h', '7d' -> seconds; ConfigError naming the text otherwise."""
    match = _DURATION.match(text)
    if not match:
        raise ConfigError(f"--ttl {text!r}: expected a duration like 90s, 30m, 24h or 7d")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def find_orphans(store: CheckpointStore) -> list[Orphan]:
    """Version directories with files and no manifest, oldest version first."""
    found = []
    for version, objects in sorted(store.version_objects().items()):
        if any(o.key == store.version_prefix(version) + MANIFEST_NAME for o in objects):
            continue
        # a backend that reports no write time makes the orphan look new: never collected
        newest = max((o.modified if o.modified is not None else time.time()) for o in objects)
        found.append(
            Orphan(version, store.uri(version), len(objects), sum(o.size for o in objects), newest)
        )
    return found


def collect_orphans(
    store: CheckpointStore, ttl_s: float, *, dry_run: bool = False, now: float | None = None
) -> tuple[list[Orphan], list[Orphan]]:
    """(collected, kept): orphans older than `ttl_s` are removed (unless `dry_run`), younger
    ones kept as possibly still being written."""
    if ttl_s < 0:
        raise ConfigError(f"--ttl must be >= 0, got {ttl_s:g}s")
    now = time.time() if now is None else now
    collected, kept = [], []
    for orphan in find_orphans(store):
        if now - orphan.newest_write < ttl_s:
            kept.append(orphan)
            continue
        if not dry_run:
            # a manifest committed since the scan makes it a version: leave it
            if store.store.exists(store.version_prefix(orphan.version) + MANIFEST_NAME):
                continue
            store.delete_version(orphan.version)
            log.info("removed orphaned checkpoint directory %s", orphan.uri)
        collected.append(orphan)
    return collected, kept
