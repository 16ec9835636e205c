"""Garbage collection of a checkpoint store: orphaned version directories and stray files.

An orphan is a version directory holding files but no manifest: a write that crashed, or one a
fenced trainer abandoned. Readers never see it (a version exists only through its manifest), but
it holds storage. `collect_orphans` removes each orphan whose newest file is older than a TTL;
the TTL is what keeps a write still in progress (which refreshes that time with every file it
uploads) from being collected under its writer.

Strays are files inside a committed version's directory that its manifest does not list. Each
write uploads under a directory of its own (the manifest's `object_dir`), so files beside the
committed one are another write's: a killed upload of the same version before the one that
committed, or a writer that lost the version to another. No manifest will ever list them (a
manifest is created only if absent). `collect_strays` removes them, one write's directory at a
time and under the same TTL, so not even a doomed write still uploading loses a file under it.
`rft gc` is the command.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import TypeVar

from rft.errors import CheckpointError, ConfigError
from rft.storage.checkpoint_manifest import MANIFEST_NAME
from rft.storage.checkpoint_store import CheckpointStore
from rft.storage.object_store_base import ObjectInfo

log = logging.getLogger(__name__)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class Leftover:
    """Files under `uri` that no manifest lists, inside version `version`'s directory."""

    version: int
    uri: str
    files: int
    size: int
    newest_write: float  # seconds since the epoch: when its newest file was written

    @property
    def what(self) -> str:
        return f"{self.files} file(s)"


@dataclass(frozen=True)
class Orphan(Leftover):
    """A whole version directory without a manifest."""


@dataclass(frozen=True)
class Stray(Leftover):
    """The files one other write left inside the committed `version` (`keys`)."""

    keys: tuple[str, ...] = ()

    @property
    def what(self) -> str:
        return f"{self.files} stray file(s) in committed v{self.version}"


L = TypeVar("L", bound=Leftover)


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
        newest = _newest_write(objects)
        found.append(
            Orphan(version, store.uri(version), len(objects), sum(o.size for o in objects), newest)
        )
    return found


def _newest_write(objects: list[ObjectInfo]) -> float:
    # a backend that reports no write time makes the files look new: never collected
    return max((o.modified if o.modified is not None else time.time()) for o in objects)


def find_strays(store: CheckpointStore) -> list[Stray]:
    """Files in committed version directories that their manifests do not list, grouped by the
    write that left them (its directory under the version), oldest version first. A version
    whose manifest cannot be read is left alone."""
    found = []
    for version, objects in sorted(store.version_objects().items()):
        prefix = store.version_prefix(version)
        if not any(o.key == prefix + MANIFEST_NAME for o in objects):
            continue  # an orphan (or a write in progress): collect_orphans' business
        try:
            listed = store.listed_keys(version)
        except CheckpointError as exc:
            log.warning("gc leaves v%d alone: %s", version, exc)
            continue
        by_write: dict[str, list[ObjectInfo]] = {}
        for info in objects:
            if info.key not in listed:
                # another write's directory, or a loose file of a version before object dirs
                rel = info.key[len(prefix) :]
                by_write.setdefault(rel.split("/", 1)[0], []).append(info)
        for name, infos in sorted(by_write.items()):
            found.append(
                Stray(
                    version,
                    store.store.uri(prefix + name),
                    len(infos),
                    sum(o.size for o in infos),
                    _newest_write(infos),
                    keys=tuple(sorted(o.key for o in infos)),
                )
            )
    return found


def collect_strays(
    store: CheckpointStore, ttl_s: float, *, dry_run: bool = False, now: float | None = None
) -> tuple[list[Stray], list[Stray]]:
    """(collected, kept): strays whose newest file is older than `ttl_s` are removed (unless
    `dry_run`); younger ones kept, as a write that may still be uploading."""
    collected, kept = by_age(find_strays(store), ttl_s, now)
    for stray in collected:
        if not dry_run:
            for key in stray.keys:
                store.store.delete(key)
            log.info(
                "removed %d stray file(s) of committed v%d at %s",
                len(stray.keys),
                stray.version,
                stray.uri,
            )
    return collected, kept


def by_age(found: list[L], ttl_s: float, now: float | None = None) -> tuple[list[L], list[L]]:
    """(older than `ttl_s`, younger): the young ones may be a write still uploading."""
    if ttl_s < 0:
        raise ConfigError(f"--ttl must be >= 0, got {ttl_s:g}s")
    now = time.time() if now is None else now
    old = [x for x in found if now - x.newest_write >= ttl_s]
    return old, [x for x in found if now - x.newest_write < ttl_s]


def collect_orphans(
    store: CheckpointStore, ttl_s: float, *, dry_run: bool = False, now: float | None = None
) -> tuple[list[Orphan], list[Orphan]]:
    """(collected, kept): orphans older than `ttl_s` are removed (unless `dry_run`), younger
    ones kept as possibly still being written."""
    old, kept = by_age(find_orphans(store), ttl_s, now)
    collected = []
    for orphan in old:
        if not dry_run:
            # a manifest committed since the scan makes it a version: leave it
            if store.store.exists(store.version_prefix(orphan.version) + MANIFEST_NAME):
                continue
            store.delete_version(orphan.version)
            log.info("removed orphaned checkpoint directory %s", orphan.uri)
        collected.append(orphan)
    return collected, kept
