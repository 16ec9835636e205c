"""Progress of a long read or write: a bar with rate and ETA on a terminal, plain lines otherwise.

On a terminal (the stream is a TTY) a tqdm bar redraws in place. Anywhere else (a log file, CI)
a line `label: done / total (pct), rate/s, ETA h:mm:ss` is printed every `interval_s` seconds and
once at the end, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, Self, TextIO


def format_eta(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):  # NaN or no rate yet
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class ReplayProgress:
    """`update(done)` with the absolute count reached; `close()` prints the last line."""

    def __init__(
        self,
        total: int,
        label: str,
        *,
        unit: str = "offsets",
        stream: TextIO | None = None,
        interval_s: float = 10.0,
        clock: Any = time.monotonic,
    ) -> None:
        self.total = max(total, 0)
        self.label = label
        self.unit = unit
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        self._clock = clock
        self._started = clock()
        self._last_line = self._started
        self.done = 0
        self._bar: Any = None
        if self.stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total, desc=label, unit=f" {unit}", unit_scale=True, file=self.stream
            )

    def line(self) -> str:
        elapsed = max(self._clock() - self._started, 1e-9)
        rate = self.done / elapsed
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        return (
            f"{self.label}: {self.done:,} / {self.total:,} {self.unit} ({pct:.0f}%), "
            f"{rate:,.0f}/s, ETA {format_eta(eta)}"
        )

    def update(self, done: int) -> None:
        done = min(done, self.total) if self.total else done
        if self._bar is not None:
            self._bar.update(done - self.done)
            self.done = done
            return
        self.done = done
        now = self._clock()
        if now - self._last_line >= self.interval_s:
            self._last_line = now
            print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        else:
            print(self.line(), file=self.stream, flush=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
