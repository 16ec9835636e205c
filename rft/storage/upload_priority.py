"""Which of two uploads sharing a store goes first: a version's weights before a training state.

A training state (AdamW moments and float32 master weights: about 18 GB at the 1.5B shape) goes
up in the background while the trainer trains on. The next version's weights (2.8 GB there) are
what the explorers and, one version later, the trainer itself wait for. When the two shared
the disk as equals, the weights finished about when the state did: in a `fully_async` run on
two H100s the trainer stood still 18 s for such a version (from the run's timestamps), and on
that host the bench took 7.2 s to put the weights beside a state against 2.1 s alone
(docs/benchmarks.md, the tenth lease). `UploadPriority` lets the urgent upload through. While any `urgent()` upload runs, the
stream of a `deferrable()` payload waits before each read. It waits at most `max_wait_s` at a
time, so back-to-back urgent uploads cannot starve it.

Pausing reads is enough for a store that sends what it reads (S3: a part at a time). A local
file store must also keep what it wrote from piling up unflushed in the page cache, or the
urgent file's fsync queues behind it (rft.storage.local_object_store syncs as it writes).
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rft.storage.object_store_base import ReadableStream
from rft.storage.payload import Payload


class UploadPriority:
    """Counts the urgent uploads in flight; deferrable streams wait while there are any."""

    def __init__(self, max_wait_s: float = 60.0) -> None:
        self.max_wait_s = max_wait_s
        self._urgent = 0
        self._changed = threading.Condition()
        self.waited_s = 0.0  # deferrable reads' waits, summed over their threads (for the log)

    @contextmanager
    def urgent(self) -> Iterator[None]:
        """Deferrable uploads pause while this block runs."""
        with self._changed:
            self._urgent += 1
        try:
            yield
        finally:
            with self._changed:
                self._urgent -= 1
                self._changed.notify_all()

    def wait_turn(self) -> None:
        """Return once no urgent upload runs, or after `max_wait_s`."""
        with self._changed:
            if self._urgent == 0:
                return
            started = time.monotonic()
            self._changed.wait_for(lambda: self._urgent == 0, timeout=self.max_wait_s)
            self.waited_s += time.monotonic() - started

    def deferrable(self, payload: Payload) -> Payload:
        """`payload`, its stream pausing for urgent uploads; the same bytes."""
        return _DeferrablePayload(payload, self)


class _DeferrablePayload:
    def __init__(self, payload: Payload, priority: UploadPriority) -> None:
        self._payload = payload
        self._priority = priority

    @property
    def size(self) -> int:
        return self._payload.size

    def open(self) -> ReadableStream:
        return _DeferrableStream(self._payload.open(), self._priority)


class _DeferrableStream:
    def __init__(self, stream: ReadableStream, priority: UploadPriority) -> None:
        self._stream = stream
        self._priority = priority

    def read(self, size: int = -1, /) -> bytes | memoryview:
        self._priority.wait_turn()
        return self._stream.read(size)

    def seek(self, offset: int, whence: int = 0, /) -> int:
        # a failed upload attempt goes back to the start, if the stream can
        seek = getattr(self._stream, "seek", None)
        if seek is None:
            raise io.UnsupportedOperation("this payload's stream cannot seek")
        return int(seek(offset, whence))

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()
