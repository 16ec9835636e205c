"""VersionPrefetch: a version's files fetched while its writer is still putting them up.

A version's files reach the store before its manifest, the commit point. A reader that starts
its download at the manifest moves the bytes after the writer, not beside it, and pays the whole
download again on top of the upload. A prefetch watches the directory of the version being
written instead: it lists it (both backends list an object only once all its bytes are there;
the local store names a file before its disk sync ends, S3 once its PUT completes), downloads
each file that lands into the buffer its reader holds for that name and size (hashing as the
bytes arrive), and stops watching once the manifest is there.

Nothing it fetched is trusted. `CheckpointStore.read_files` takes a prefetched file only when
its object key (so the committed write's object directory), size and sha256 are the manifest's,
and downloads every other file as it would without a prefetch. A writer fenced mid-upload, the
leftovers of a crashed write, or a version that never commits cost only the download.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from rft.errors import StorageError
from rft.storage.checkpoint_manifest import MANIFEST_NAME
from rft.storage.checkpoint_store import TRANSFER_THREADS, CheckpointStore, PrefetchedFile
from rft.storage.payload import Sha256Sink

log = logging.getLogger(__name__)

#: Seconds between listings once the version's first file has landed (its others follow within
#: the upload), and while none has (the writer may be training for minutes: fewer requests).
POLL_S = 0.02
IDLE_POLL_S = 0.05

#: Where a prefetched file lands: a buffer of exactly `size` bytes for `name`, or None to leave
#: the file to the reader's own download.
BufferForName = Callable[[str, int], memoryview | None]


class VersionPrefetch:
    """Watches `version`'s directory in `checkpoints`' store on a thread of its own and fetches
    the files `buffer_for` gives a buffer for, until `stop()`."""

    def __init__(
        self, checkpoints: CheckpointStore, version: int, buffer_for: BufferForName
    ) -> None:
        self.version = version
        self._store = checkpoints.store
        self._prefix = checkpoints.version_prefix(version)
        self._buffer_for = buffer_for
        self._files: dict[str, PrefetchedFile] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # as many downloads at once as a writer has uploads
        self._pool = ThreadPoolExecutor(TRANSFER_THREADS, thread_name_prefix="checkpoint-prefetch")
        self._thread = threading.Thread(
            target=self._watch, name=f"checkpoint-prefetch-v{version}", daemon=True
        )
        self._thread.start()

    def _watch(self) -> None:
        object_dir: str | None = None  # the first write seen; another one's files are left alone
        begun: set[str] = set()
        while not self._stop.is_set():
            try:
                listed = self._store.list(self._prefix)
            except StorageError as exc:
                log.debug("prefetch of v%d: listing failed (%s); trying again", self.version, exc)
                listed = []
            committed = False
            for info in listed:
                relative = info.key[len(self._prefix) :]
                if relative == MANIFEST_NAME:
                    committed = True
                    continue
                directory, slash, name = relative.partition("/")
                if not slash or name in begun or object_dir not in (None, directory):
                    continue
                buffer = self._buffer_for(name, info.size)
                if buffer is None:
                    continue
                object_dir = directory
                begun.add(name)
                self._pool.submit(self._fetch, info.key, name, info.size, buffer)
            if committed:
                return  # every file the manifest commits was listed by now
            self._stop.wait(POLL_S if begun else IDLE_POLL_S)

    def _fetch(self, key: str, name: str, size: int, buffer: memoryview) -> None:
        digest = Sha256Sink()
        try:
            data = self._store.get_into(key, size, digest, buffer)
        except StorageError as exc:
            digest.close()
            # the reader downloads it again from the manifest, and reports what it finds there
            log.debug("prefetch of v%d: %s not fetched (%s)", self.version, key, exc)
            return
        sha256 = digest.hexdigest()
        with self._lock:
            self._files[name] = PrefetchedFile(key=key, size=size, sha256=sha256, data=data)

    def stop(self) -> dict[str, PrefetchedFile]:
        """Stop watching, wait for the downloads already begun (their buffers are the reader's
        again after this), and return what was fetched, by file name."""
        self._stop.set()
        self._thread.join()
        self._pool.shutdown(wait=True)
        with self._lock:
            return dict(self._files)
