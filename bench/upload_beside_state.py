"""A version's weights going up while a training state goes up beside them, to one local store.

In `fully_async` the trainer lands a version (its manifest and announcement) before it begins
the next, and a version that carries the training state writes that state in the background
after it lands. The next version's weights then go up beside the state. At the 1.5B shape
that is 2.8 GB beside about 18 GB. In a `fully_async` run on two H100s (the tenth lease,
docs/benchmarks.md) the trainer stood still 18 s for such a version, by the run's timestamps,
and in `fixed` one took 3.9 s to publish against 1.3–2.2 s for the others. This
bench puts `--weights-mib` MiB of random bytes as `--files` files, as `CheckpointStore.upload`
puts a version (a Sha256Reader over each, several at once, fsync before the rename). It times
them each way:

- `alone`: the store as rft runs it (an upload flushes every 64 MiB as it writes);
- `alone, fsync at end only`: `sync_every=0`, as the store was before: whether flushing as it
  goes slows an upload that has the disk to itself;
- `beside the state, as before`: the state (`--state-mib` MiB in `--state-files` files,
  `CheckpointStore.write_part`) starts `--lead` s before the weights, both at end-only fsync, with
  no priority;
- `beside the state, flushing`: the same with the store flushing as it writes;
- `beside the state, now`: flushing, and the state's files deferrable while the weights go up
  (rft.storage.upload_priority), as the trainer's checkpointer writes them.

Beside each: when the state's write ended, from its start. Medians of `--rounds` alternated
rounds; the weights' time against `alone`. Size the state under the machine's memory, or the
page cache, not the disk, is what is measured.

Run: python bench/upload_beside_state.py [--weights-mib 1280] [--files 8] [--state-mib 6144]
     [--state-files 12] [--lead 1.0] [--rounds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rft.storage import CheckpointStore, LocalObjectStore  # noqa: E402
from rft.storage.local_object_store import SYNC_EVERY  # noqa: E402
from rft.storage.payload import BytesPayload, Payload  # noqa: E402
from rft.storage.upload_priority import UploadPriority  # noqa: E402


@dataclass(frozen=True)
class Way:
    name: str
    sync_every: int
    with_state: bool
    prioritized: bool


WAYS = [
    Way("alone", SYNC_EVERY, False, False),
    Way("alone, fsync at end only", 0, False, False),
    Way("beside the state, as before", 0, True, False),
    Way("beside the state, flushing", SYNC_EVERY, True, False),
    Way("beside the state, now", SYNC_EVERY, True, True),
]


def files_of(data: memoryview, count: int, mib: int) -> dict[str, Payload]:
    """`count` files of `mib` MiB in all, each a view of the same random bytes."""
    each = (mib << 20) // count
    return {f"f{i:02d}.bin": BytesPayload(data[:each]) for i in range(count)}


def one_round(
    way: Way, base: Path, data: memoryview, args: argparse.Namespace, round_no: int
) -> tuple[float, float | None]:
    """The weights' upload time, and when the state's write ended (from its start)."""
    root = base / f"r{round_no}-{way.name.replace(' ', '_').replace(',', '')}"
    checkpoints = CheckpointStore(LocalObjectStore(root, sync_every=way.sync_every), "b", "r")
    checkpoints.write(1, 1, None, payloads={"marker": BytesPayload(b"v1")})
    priority = UploadPriority()
    state_ended: list[float] = []
    state_thread = None
    if way.with_state:
        state = files_of(data, args.state_files, args.state_mib)
        if way.prioritized:
            state = {name: priority.deferrable(p) for name, p in state.items()}

        def write_state() -> None:
            started = time.perf_counter()
            checkpoints.write_part(1, "trainer_state", state)
            state_ended.append(time.perf_counter() - started)

        state_thread = threading.Thread(target=write_state)
        state_thread.start()
        time.sleep(args.lead)
    urgent: Callable[[], AbstractContextManager[None]] = (
        priority.urgent if way.prioritized else nullcontext
    )
    started = time.perf_counter()
    with urgent():
        checkpoints.upload(2, 2, None, payloads=files_of(data, args.files, args.weights_mib))
    weights_s = time.perf_counter() - started
    if state_thread is not None:
        state_thread.join()
    shutil.rmtree(root)
    os.sync()  # the next way starts with the disk's queue drained
    return weights_s, (state_ended[0] if state_ended else None)


def random_data(largest_mib: int) -> memoryview:
    """`largest_mib` MiB of random bytes: every file a bench writes is a view of them."""
    return memoryview(
        np.random.default_rng(0).integers(0, 256, largest_mib << 20, dtype=np.uint8).data
    ).cast("B")


class _Named(Protocol):
    @property
    def name(self) -> str: ...


W = TypeVar("W", bound=_Named)


def alternated(
    ways: list[W],
    args: argparse.Namespace,
    prefix: str,
    one_round: Callable[[W, Path, memoryview, argparse.Namespace, int], tuple[float, float | None]],
    second: str,
) -> Iterator[tuple[W, float, float | None]]:
    """`one_round` for each way, `args.rounds` times, in reversed order every other round, in
    a scratch folder under `args.dir`; prints each row (`second` names its second figure)."""
    largest = max(args.state_mib // args.state_files, args.weights_mib // args.files) + 1
    data = random_data(largest)
    base = Path(tempfile.mkdtemp(prefix=prefix, dir=args.dir))
    try:
        for round_no in range(args.rounds):
            order = ways if round_no % 2 == 0 else list(reversed(ways))
            for way in order:
                weights_s, other_s = one_round(way, base, data, args, round_no)
                print(
                    f"ROW round={round_no} way={way.name!r} weights_s={weights_s:.3f} "
                    f"{second}={other_s}",
                    flush=True,
                )
                yield way, weights_s, other_s
    finally:
        shutil.rmtree(base, ignore_errors=True)


def size_arguments(parser: argparse.ArgumentParser) -> None:
    """The sizes, rounds and folder both upload benches take."""
    parser.add_argument("--weights-mib", type=int, default=1280)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--state-mib", type=int, default=6144)
    parser.add_argument("--state-files", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None)


def print_medians(
    ways: list[W], rows: Iterable[tuple[W, float, float | None]], columns: tuple[str, str]
) -> None:
    """Each way's median weights time, against the first way's, beside its second figure's
    median; `columns` names the two figures."""
    weights: dict[str, list[float]] = {w.name: [] for w in ways}
    other: dict[str, list[float]] = {w.name: [] for w in ways}
    for way, weights_s, other_s in rows:
        weights[way.name].append(weights_s)
        if other_s is not None:
            other[way.name].append(other_s)
    first = statistics.median(weights[ways[0].name])
    print(f"| way | {columns[0]} | vs {ways[0].name} | {columns[1]} |")
    print("|---|---|---|---|")
    for way in ways:
        w = statistics.median(weights[way.name])
        o = f"{statistics.median(other[way.name]):.2f} s" if other[way.name] else "-"
        print(f"| {way.name} | {w:.2f} s | {w / first:.2f}x | {o} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size_arguments(parser)
    parser.add_argument("--lead", type=float, default=1.0)
    args = parser.parse_args()
    rows = list(alternated(WAYS, args, "upload-beside-state-", one_round, "state_s"))
    print(
        f"\n{args.weights_mib} MiB of weights in {args.files} files; beside them "
        f"{args.state_mib} MiB of training state in {args.state_files} files, started "
        f"{args.lead} s before; medians of {args.rounds} alternated rounds\n"
    )
    print_medians(WAYS, rows, ("weights go up", "the state's write ended after"))


if __name__ == "__main__":
    main()
