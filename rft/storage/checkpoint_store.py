"""Versioned, verified model checkpoints in an object store.

Layout: `<project>/<name>/v<version:06d>/<files...>` plus `manifest.json` in the same directory.
A version exists only once its manifest does: `write` uploads every file first and the manifest
last, and readers look at manifests only, so a crashed write is invisible. The manifest is
created only if absent (S3 If-None-Match, O_EXCL locally): that create is the commit point, and
of two writers of one version exactly one commits it; the other gets `VersionTakenError`. `download` checks every
file's size and sha256 and publishes the directory only when all match.

Version 0 is the base model and is never written: with no checkpoint, `latest_version()` is 0 and
explorers and trainers start from the base model named in the config.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar, cast

from rft.errors import CheckpointError, FencedError, StorageError
from rft.fault_points import fault_point
from rft.storage.checkpoint_manifest import (
    MANIFEST_NAME,
    CheckpointManifest,
    ConsumedOffset,
    ManifestFile,
)
from rft.storage.object_store_base import (
    ObjectExistsError,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectSizeError,
    ObjectStore,
    validate_key,
)
from rft.storage.payload import FilePayload, Payload, Sha256Reader, Sha256Sink

log = logging.getLogger(__name__)

#: The version that stands for the base model; it has no checkpoint.
BASE_VERSION = 0

#: Directory inside a version for what only trainers read (optimizer state); explorers skip it.
TRAINER_STATE_DIR = "trainer_state/"

#: Directory inside a version for the listings of parts written after it (`write_part`).
PARTS_DIR = "parts/"

_VERSION_DIR = re.compile(r"^v(\d{6,})/")

OffsetLike = ConsumedOffset | tuple[str, int, int]

#: Where a downloaded file of a version lands: a buffer of exactly its size, or None for a new one.
BufferFor = Callable[[CheckpointManifest, ManifestFile], memoryview | None]


# manifest.extra key naming the directory, under the version prefix, that holds its files
OBJECT_DIR_KEY = "object_dir"

#: How many of a version's files move at once. Each file's sha256 is one serial pass, so a
#: version cut into several files (rft.engines.weights.safetensors_payloads) is hashed on as
#: many cores on both sides, and its transfers overlap.
TRANSFER_THREADS = 8

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


def _each_at_once(
    work: Callable[[_Item], _Result], items: Sequence[_Item], what: str
) -> list[_Result]:
    """`work` on every item, up to TRANSFER_THREADS at once; results in the items' order. The
    first failure (in that order) is raised once every transfer has stopped, so no thread is
    still writing when the caller cleans up."""
    if len(items) <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(min(len(items), TRANSFER_THREADS), thread_name_prefix=what) as pool:
        futures = [pool.submit(work, item) for item in items]
        errors = [future.exception() for future in futures]
    for error in errors:
        if error is not None:
            raise error
    return [future.result() for future in futures]


@dataclasses.dataclass(frozen=True)
class PrefetchedFile:
    """A file fetched before its version's manifest existed (rft.storage.checkpoint_prefetch):
    the object it came from, its size and sha256 as it landed, and the bytes."""

    key: str
    size: int
    sha256: str
    data: memoryview


class VersionTakenError(CheckpointError, FencedError):
    """Another writer created this version's manifest first; this writer's version is void."""


@dataclasses.dataclass(frozen=True)
class StagedVersion:
    """A version whose files are in the store and whose manifest is not: `upload`'s result,
    which `commit` turns into a version."""

    manifest: CheckpointManifest
    manifest_json: bytes


class CheckpointStore:
    """Checkpoints of one run (`project`/`name`) inside an object store."""

    def __init__(self, store: ObjectStore, project: str, name: str) -> None:
        for label, value in (("project", project), ("name", name)):
            if not isinstance(value, str) or value in ("", ".", "..") or "/" in value:
                raise CheckpointError(
                    f"checkpoint store {label} must be a non-empty string without '/' "
                    f"(and not '.' or '..'): {value!r}"
                )
            try:
                validate_key(value)
            except StorageError as exc:
                raise CheckpointError(f"checkpoint store {label} {value!r}: {exc}") from exc
        self.store = store
        self.project = project
        self.name = name
        self._root = f"{project}/{name}/"

    def __repr__(self) -> str:
        return f"CheckpointStore({self.store.uri(self._root)!r})"

    # -- layout -------------------------------------------------------------------------------

    def version_prefix(self, version: int) -> str:
        """Key prefix of a version's directory inside the object store (ends with '/')."""
        return f"{self._root}v{version:06d}/"

    def uri(self, version: int) -> str:
        """URI of a version's directory, e.g. 's3://rft/proj/run/v000003/'."""
        self._check_version(version)
        return self.store.uri(self.version_prefix(version))

    def _manifest_key(self, version: int) -> str:
        return self.version_prefix(version) + MANIFEST_NAME

    @staticmethod
    def _check_version(version: int) -> None:
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise CheckpointError(
                f"checkpoint version must be an integer >= 1, got {version!r} "
                f"(version {BASE_VERSION} is the base model and has no checkpoint)"
            )

    # -- writing ------------------------------------------------------------------------------

    def write(
        self,
        version: int,
        train_step: int,
        local_dir: Path | str | None,
        consumed_offsets: Iterable[OffsetLike] = (),
        parent_version: int | None = None,
        extra: Mapping[str, Any] | None = None,
        before_commit: Callable[[CheckpointManifest], None] | None = None,
        payloads: Mapping[str, Payload] | None = None,
    ) -> CheckpointManifest:
        """Upload every file under `local_dir` and every one of `payloads` (name -> what it
        holds, from memory: no trip through the local disk) as `version`, then its manifest;
        return it. Each file's sha256 is taken as it is uploaded. `upload` then `commit`, for
        a writer that does both in one place.

        `before_commit(manifest)` runs after the files are up and before the manifest is
        created; if it raises, no manifest is written (the trainer checks there that it still
        owns the run, and stages its announcement).

        Versions are immutable: writing a version that already has a manifest raises
        CheckpointError; one whose manifest another writer creates while this one uploads raises
        VersionTakenError. Rewriting a version whose earlier write crashed (files, no manifest) is
        allowed and overwrites the leftovers.
        """
        staged = self.upload(
            version, train_step, local_dir, consumed_offsets, parent_version, extra, payloads
        )
        return self.commit(staged, before_commit)

    def upload(
        self,
        version: int,
        train_step: int,
        local_dir: Path | str | None,
        consumed_offsets: Iterable[OffsetLike] = (),
        parent_version: int | None = None,
        extra: Mapping[str, Any] | None = None,
        payloads: Mapping[str, Payload] | None = None,
    ) -> StagedVersion:
        """The first half of `write`: the files up, and the manifest that will commit them
        (not yet created: the version does not exist for readers). Thread-safe against the
        writer's other work, so a trainer may upload while it trains; `commit` may be called
        more than once with the same staged version (a commit whose announcement failed is
        tried again with the same files, never uploaded twice)."""
        self._check_version(version)
        if parent_version is not None and not (0 <= parent_version < version):
            raise CheckpointError(
                f"checkpoint v{version}: parent_version must be in [0, {version}), "
                f"got {parent_version!r}"
            )
        offsets = tuple(_to_offset(o, version) for o in consumed_offsets)
        files = _sources(local_dir, payloads or {})
        manifest_key = self._manifest_key(version)
        if self.store.exists(manifest_key):
            raise CheckpointError(
                f"checkpoint v{version} already exists at {self.store.uri(manifest_key)}; "
                "versions are immutable"
            )
        self.store.ensure_bucket()
        # Each write puts its files under a directory of its own: a writer fenced mid-upload that
        # goes on uploading cannot overwrite the files of the version another writer committed.
        object_dir, entries = self._upload_all(version, files)
        manifest = CheckpointManifest(
            version=version,
            train_step=train_step,
            created_at=int(time.time() * 1000),
            files=tuple(entries),
            consumed_offsets=offsets,
            parent_version=parent_version,
            extra={**(extra or {}), OBJECT_DIR_KEY: object_dir},
        )
        # serialized here, not at the commit: bad extras fail before anything is staged
        return StagedVersion(manifest, manifest.to_json())

    def commit(
        self,
        staged: StagedVersion,
        before_commit: Callable[[CheckpointManifest], None] | None = None,
    ) -> CheckpointManifest:
        """The second half of `write`: `before_commit(manifest)`, then the manifest created if
        absent (the commit point); the committed manifest."""
        manifest = staged.manifest
        fault_point("checkpoint.before_manifest")
        if before_commit is not None:
            before_commit(manifest)
        self._commit_manifest(
            manifest.version, self._manifest_key(manifest.version), staged.manifest_json
        )
        log.info(
            "checkpoint v%d written: %d files, %d bytes at %s",
            manifest.version,
            len(manifest.files),
            manifest.total_size,
            self.uri(manifest.version),
        )
        return manifest

    def _commit_manifest(self, version: int, key: str, payload: bytes) -> None:
        """Create the manifest if absent: the commit point of the version."""
        try:
            self.store.put_bytes_if_absent(key, payload)
        except ObjectExistsError as exc:
            # A PUT retried after a lost response finds its own first attempt: same bytes.
            try:
                if self.store.get_bytes(key) == payload:
                    return
            except ObjectNotFoundError:
                pass  # pruned meanwhile: still someone else's version
            raise VersionTakenError(
                f"checkpoint v{version}: another writer created its manifest first at "
                f"{self.store.uri(key)}; this writer's v{version} is void (is a second trainer "
                "running on this run?)"
            ) from exc

    def object_key(self, version: int, name: str, object_dir: str | None) -> str:
        """The store key of file `name` of `version`, written under `object_dir` (None: the
        version's own prefix, as versions written before object dirs existed)."""
        return self.version_prefix(version) + (f"{object_dir}/" if object_dir else "") + name

    def file_key(self, version: int, name: str) -> str:
        """The store key of file `name` of the written `version` (from its manifest)."""
        manifest = self.read_manifest(version)
        return self.object_key(version, name, manifest.extra.get(OBJECT_DIR_KEY))

    def _upload_all(
        self, version: int, files: Mapping[str, Payload]
    ) -> tuple[str, list[ManifestFile]]:
        """`files` up, several at once, under a new object directory of `version`: the
        directory's name and the files' entries, in `files`' order."""
        object_dir = secrets.token_hex(6)
        entries = _each_at_once(
            lambda item: self._upload(
                version, item[0], item[1], self.object_key(version, item[0], object_dir)
            ),
            list(files.items()),
            "checkpoint-put",
        )
        return object_dir, entries

    def _upload(self, version: int, name: str, source: Payload, key: str) -> ManifestFile:
        """One file up, its sha256 taken from the bytes as they are sent."""
        size = source.size
        try:
            handle = source.open()
        except OSError as exc:
            raise CheckpointError(f"checkpoint v{version}: cannot read {name}: {exc}") from exc
        with closing(cast(Any, handle)):
            reader = Sha256Reader(handle)
            self.store.put_stream(key, reader, size)
            # A file still being written when we stat'ed it would upload a torn copy.
            if reader.size != size or handle.read(1):
                raise CheckpointError(
                    f"checkpoint v{version}: {name} changed size during upload "
                    f"(said {size} bytes, read {reader.size}+)"
                )
        return ManifestFile(name=name, size=size, sha256=reader.hexdigest())

    # -- parts written after the version ----------------------------------------------------

    def part_key(self, version: int, part: str) -> str:
        """The store key of the listing of `part` of `version` (its commit point)."""
        return self.version_prefix(version) + f"{PARTS_DIR}{validate_key(part)}.json"

    def write_part(
        self,
        version: int,
        part: str,
        payloads: Mapping[str, Payload],
        extra: Mapping[str, Any] | None = None,
    ) -> CheckpointManifest:
        """Add `part` (files of their own, e.g. a trainer's training state) to the committed
        `version`: its files, then its listing (each file's size and sha256, `extra`) created
        only if absent. Until the listing exists the part does not exist for readers, as a
        version does not before its manifest."""
        manifest = self.read_manifest(version)
        object_dir, entries = self._upload_all(version, _sources(None, payloads))
        listing = dataclasses.replace(
            manifest,
            created_at=int(time.time() * 1000),
            files=tuple(entries),
            extra={**(extra or {}), OBJECT_DIR_KEY: object_dir, "part": part},
        )
        fault_point("checkpoint.before_part_listing")
        key = self.part_key(version, part)
        try:
            self.store.put_bytes_if_absent(key, listing.to_json())
        except ObjectExistsError as exc:
            raise CheckpointError(
                f"checkpoint v{version}: part {part!r} was written already ({self.store.uri(key)})"
            ) from exc
        return listing

    def read_part(
        self, version: int, part: str
    ) -> tuple[CheckpointManifest, dict[str, memoryview]] | None:
        """The listing of `part` of `version` and its files, each verified (size, sha256);
        None when the part was never completed (no listing)."""
        key = self.part_key(version, part)
        try:
            raw = self.store.get_bytes(key)
        except ObjectNotFoundError:
            return None
        listing = CheckpointManifest.from_json(raw, source=self.store.uri(key))
        return listing, self._fetch(listing, listing.files)

    def listed_keys(self, version: int) -> set[str]:
        """Every key the committed `version` stands for: its manifest and files, and the
        listing and files of each of its completed parts."""
        manifest = self.read_manifest(version)
        keys = {self._manifest_key(version)} | {
            self.object_key(version, f.name, manifest.extra.get(OBJECT_DIR_KEY))
            for f in manifest.files
        }
        for info in self.store.list(self.version_prefix(version) + PARTS_DIR):
            part = CheckpointManifest.from_json(
                self.store.get_bytes(info.key), source=self.store.uri(info.key)
            )
            keys.add(info.key)
            keys |= {
                self.object_key(version, f.name, part.extra.get(OBJECT_DIR_KEY)) for f in part.files
            }
        return keys

    # -- reading ------------------------------------------------------------------------------

    def list_versions(self) -> list[int]:
        """Versions that have a manifest, ascending. Directories without one are invisible."""
        return sorted(v for v, has_manifest in self._scan().items() if has_manifest)

    def _scan(self) -> dict[int, bool]:
        """Every version directory present -> whether it has a manifest."""
        return {
            version: any(o.key == self._manifest_key(version) for o in objects)
            for version, objects in self.version_objects().items()
        }

    def version_objects(self) -> dict[int, list[ObjectInfo]]:
        """Every version directory present -> the objects under it (manifest included)."""
        found: dict[int, list[ObjectInfo]] = {}
        for info in self.store.list(self._root):
            match = _VERSION_DIR.match(info.key[len(self._root) :])
            if match:
                found.setdefault(int(match.group(1)), []).append(info)
        return found

    def latest_version(self) -> int:
        """Newest version with a manifest, or BASE_VERSION (0) when none exists."""
        versions = self.list_versions()
        return versions[-1] if versions else BASE_VERSION

    def has_manifest(self, version: int) -> bool:
        """Whether `version` was committed (its manifest exists)."""
        self._check_version(version)
        return self.store.exists(self._manifest_key(version))

    def read_manifest(self, version: int) -> CheckpointManifest:
        """The version's manifest; CheckpointError if it is missing or malformed."""
        self._check_version(version)
        key = self._manifest_key(version)
        try:
            data = self.store.get_bytes(key)
        except ObjectNotFoundError as exc:
            raise CheckpointError(
                f"checkpoint v{version} has no manifest at {self.store.uri(key)}: "
                "it was never written or its write did not finish"
            ) from exc
        manifest = CheckpointManifest.from_json(data, source=self.store.uri(key))
        if manifest.version != version:
            raise CheckpointError(
                f"{self.store.uri(key)}: manifest says version {manifest.version}, "
                f"but it sits in the directory of v{version}"
            )
        return manifest

    def read_files(
        self,
        version: int,
        skip_prefixes: tuple[str, ...] = (),
        into: BufferFor | None = None,
        prefetched: Mapping[str, PrefetchedFile] | None = None,
    ) -> tuple[CheckpointManifest, dict[str, memoryview]]:
        """`version`'s manifest and its files in memory (names starting with one of
        `skip_prefixes` left out), each hashed as it downloads and checked against the
        manifest's size and sha256: CheckpointError naming the file and its object key on any
        mismatch. Nothing touches the local disk. `into(manifest, file)` may give the buffer a
        file lands in (exactly its size; None: a new one), e.g. one kept from the last version.

        A file of `prefetched` (by name, fetched before the manifest existed) is taken instead
        of downloaded when it came from the manifest's object key with the manifest's size and
        sha256; any other is downloaded."""
        manifest = self.read_manifest(version)
        wanted = [f for f in manifest.files if not f.name.startswith(skip_prefixes)]
        object_dir = manifest.extra.get(OBJECT_DIR_KEY)
        taken: dict[str, memoryview] = {}
        for entry in wanted:
            early = (prefetched or {}).get(entry.name)
            if early is not None and (early.key, early.size, early.sha256) == (
                self.object_key(version, entry.name, object_dir),
                entry.size,
                entry.sha256,
            ):
                taken[entry.name] = early.data
        rest = [entry for entry in wanted if entry.name not in taken]
        fetched = {**taken, **self._fetch(manifest, rest, into)}
        return manifest, {entry.name: fetched[entry.name] for entry in wanted}

    def _fetch(
        self,
        manifest: CheckpointManifest,
        files: Iterable[ManifestFile],
        into: BufferFor | None = None,
    ) -> dict[str, memoryview]:
        wanted = list(files)
        fetched = _each_at_once(
            lambda entry: self._fetch_file(
                manifest, entry, None if into is None else into(manifest, entry)
            ),
            wanted,
            "checkpoint-get",
        )
        return {entry.name: data for entry, data in zip(wanted, fetched, strict=True)}

    def _fetch_file(
        self, manifest: CheckpointManifest, entry: ManifestFile, buffer: memoryview | None
    ) -> memoryview:
        """One file into memory (`buffer`, or a new one), hashed as it lands and checked against
        the manifest."""
        version, object_dir = manifest.version, manifest.extra.get(OBJECT_DIR_KEY)
        key = self.object_key(version, entry.name, object_dir)
        uri = self.store.uri(key)
        digest = Sha256Sink()
        try:
            data = self.store.get_into(key, entry.size, digest, buffer)
        except ObjectNotFoundError as exc:
            digest.close()
            raise CheckpointError(
                f"checkpoint v{version}: file {entry.name!r} listed in the manifest is "
                f"missing at {uri}"
            ) from exc
        except ObjectSizeError as exc:
            digest.close()
            raise CheckpointError(
                f"checkpoint v{version}: file {entry.name!r} at {uri} has the wrong size: "
                f"expected {exc.expected} bytes, got {exc.held}"
            ) from exc
        except StorageError as exc:
            digest.close()
            raise CheckpointError(
                f"checkpoint v{version}: download of file {entry.name!r} from {uri} failed: {exc}"
            ) from exc
        actual = digest.hexdigest()
        if actual != entry.sha256:
            raise CheckpointError(
                f"checkpoint v{version}: file {entry.name!r} at {uri} is corrupt: "
                f"expected sha256 {entry.sha256}, got {actual}"
            )
        return data

    def download(
        self, version: int, dest_dir: Path | str, skip_prefixes: tuple[str, ...] = ()
    ) -> Path:
        """Download and verify `version` into `dest_dir` (which must be absent or empty).

        Files whose names start with one of `skip_prefixes` are left out (explorers skip the
        trainer's optimizer state); every file that is downloaded is verified.

        Files land in a hidden sibling temp directory; only after every file's size and sha256
        match the manifest is it renamed to `dest_dir`. The manifest is copied in as well.
        Returns `dest_dir`. Any mismatch or missing file raises CheckpointError naming the file.
        """
        manifest = self.read_manifest(version)
        dest = Path(dest_dir).absolute()
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise CheckpointError(
                f"cannot download checkpoint v{version} into {dest}: it exists and is not empty"
            )
        tmp = dest.with_name(f".{dest.name}.partial-{secrets.token_hex(4)}")
        try:
            tmp.mkdir(parents=True)
            object_dir = manifest.extra.get(OBJECT_DIR_KEY)
            _each_at_once(
                lambda entry: self._download_file(version, entry, tmp, object_dir),
                [f for f in manifest.files if not f.name.startswith(skip_prefixes)],
                "checkpoint-get",
            )
            (tmp / MANIFEST_NAME).write_bytes(manifest.to_json())
            if dest.exists():
                dest.rmdir()
            os.rename(tmp, dest)
        except OSError as exc:
            raise CheckpointError(
                f"cannot download checkpoint v{version} into {dest}: {exc}"
            ) from exc
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def _download_file(
        self, version: int, entry: ManifestFile, into: Path, object_dir: str | None
    ) -> None:
        key = self.object_key(version, entry.name, object_dir)
        uri = self.store.uri(key)
        target = into.joinpath(*entry.name.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        size = 0
        try:
            with target.open("wb") as out, closing(self.store.iter_chunks(key)) as chunks:
                for chunk in chunks:
                    size += len(chunk)
                    if size > entry.size:
                        break  # no need to stream a runaway object to the end
                    digest.update(chunk)
                    out.write(chunk)
        except ObjectNotFoundError as exc:
            raise CheckpointError(
                f"checkpoint v{version}: file {entry.name!r} listed in the manifest is missing "
                f"at {uri}"
            ) from exc
        except StorageError as exc:
            raise CheckpointError(
                f"checkpoint v{version}: download of file {entry.name!r} from {uri} failed: {exc}"
            ) from exc
        if size != entry.size:
            shown = f"more than {entry.size}" if size > entry.size else str(size)
            raise CheckpointError(
                f"checkpoint v{version}: file {entry.name!r} at {uri} has the wrong size: "
                f"expected {entry.size} bytes, got {shown}"
            )
        actual = digest.hexdigest()
        if actual != entry.sha256:
            raise CheckpointError(
                f"checkpoint v{version}: file {entry.name!r} at {uri} is corrupt: "
                f"expected sha256 {entry.sha256}, got {actual}"
            )

    # -- retention ----------------------------------------------------------------------------

    def prune(
        self, keep_last: int, in_use: Callable[[], Collection[int] | None] | None = None
    ) -> list[int]:
        """Delete all but the newest `keep_last` complete versions; return the versions removed.

        The newest complete version is never deleted, nor any version `in_use()` names (the
        versions live explorers still hold; asked only when something would be deleted). When
        `in_use()` returns None (not known), no complete version is deleted. Incomplete
        directories (crash leftovers) older than the newest complete version are removed too;
        newer ones may be a write in progress and are left alone. A version's manifest is
        deleted before its files, so a version being pruned turns invisible first and is never
        seen half-deleted.
        """
        if not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 1:
            raise CheckpointError(f"prune keep_last must be an integer >= 1, got {keep_last!r}")
        scan = self._scan()
        complete = sorted(v for v, has_manifest in scan.items() if has_manifest)
        if not complete:
            return []
        newest = complete[-1]
        doomed = set(complete[:-keep_last])
        if doomed and in_use is not None:
            held = in_use()
            kept = doomed if held is None else doomed & set(held)
            if kept:
                log.info(
                    "retention keeps versions %s: live explorers hold (or may hold) them",
                    sorted(kept),
                )
            doomed -= kept
        doomed |= {v for v, has_manifest in scan.items() if not has_manifest and v < newest}
        for version in sorted(doomed):
            self._delete_version(version)
        if doomed:
            log.info("pruned checkpoint versions %s of %s", sorted(doomed), self)
        return sorted(doomed)

    def delete_version(self, version: int) -> None:
        """Remove a version directory: manifest first (the version turns invisible), then
        the files; a directory without a manifest (crash leftovers) is removed the same way."""
        self._check_version(version)
        self._delete_version(version)

    def _delete_version(self, version: int) -> None:
        prefix = self.version_prefix(version)
        self.store.delete(prefix + MANIFEST_NAME)
        for info in self.store.list(prefix):
            self.store.delete(info.key)


def _to_offset(value: OffsetLike, version: int) -> ConsumedOffset:
    if isinstance(value, ConsumedOffset):
        return value
    try:
        topic, partition, offset = value
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint v{version}: consumed offset {value!r} is not (topic, partition, offset)"
        ) from exc
    if not isinstance(topic, str) or not topic:
        raise CheckpointError(f"checkpoint v{version}: consumed offset topic {topic!r} is invalid")
    for label, number in (("partition", partition), ("offset", offset)):
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise CheckpointError(
                f"checkpoint v{version}: consumed offset {label} {number!r} of topic {topic!r} "
                "must be an integer >= 0"
            )
    return ConsumedOffset(topic=topic, partition=partition, offset=offset)


def _sources(local_dir: Path | str | None, payloads: Mapping[str, Payload]) -> dict[str, Payload]:
    """The files of a write by name: those under `local_dir`, then `payloads`."""
    files: dict[str, Payload] = {}
    if local_dir is not None:
        local = Path(local_dir)
        try:
            files = {rel: FilePayload(local / rel) for rel in _local_files(local)}
        except OSError as exc:
            raise CheckpointError(f"checkpoint source {local}: {exc}") from exc
    for name in payloads:
        try:
            validate_key(name)
        except StorageError as exc:
            raise CheckpointError(f"checkpoint file name {name!r}: {exc}") from exc
        if name == MANIFEST_NAME or name in files:
            raise CheckpointError(
                f"checkpoint file {name!r} is given twice or takes the manifest's name"
            )
        files[name] = payloads[name]
    if not files:
        where = f"checkpoint source {local_dir}" if local_dir is not None else "the checkpoint"
        raise CheckpointError(f"{where} holds no files")
    return files


def _local_files(local: Path) -> list[str]:
    """Relative '/'-paths of every regular file under `local`, sorted."""
    if not local.is_dir():
        raise CheckpointError(f"checkpoint source {local} is not a directory")
    names: list[str] = []
    for path in sorted(local.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(local).as_posix()
        if rel == MANIFEST_NAME:
            raise CheckpointError(
                f"checkpoint source {local} holds a file named {MANIFEST_NAME!r}; "
                "that name is reserved for the manifest"
            )
        try:
            validate_key(rel)
        except StorageError as exc:
            raise CheckpointError(f"checkpoint source file {path}: {exc}") from exc
        names.append(rel)
    return names
