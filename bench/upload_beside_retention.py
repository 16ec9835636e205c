"""A version's weights going up while retention deletes an old version, to one local store.

After each version lands the trainer asks for retention (`trainer.max_checkpoints_to_keep`).
Until 2026-11-28 the prune ran on the thread that uploads the versions, so the next version's
weights waited behind it. In a `fully_async` run on two H200s at the 1.5B shape the prune was
logged 6.5-7.4 s after the next version was taken, whenever the deleted version held a
training state (about 18 GB) or a state was going up beside it, and those versions took
8.1-8.9 s to publish against 1.5-3.4 s for the others. Now the prune runs on a thread of its
own, beside the uploads.

This bench writes an old version (`--weights-mib` MiB of weights in `--files` files and
`--state-mib` MiB of training state in `--state-files` files) and a newer one, flushes the
disk and waits `--settle` s, then puts the next version's weights up (`CheckpointStore.upload`,
as the trainer does) while `CheckpointStore.prune(keep_last=1)` deletes the old one. It times from the moment the
prune is asked for to the weights being durable, each way:

- `alone`: no prune (the ceiling);
- `behind the prune, as before`: the prune, then the upload, on one thread;
- `beside the prune, now`: the prune on a thread of its own, while the weights go up.

Beside each: when the prune ended. Medians of `--rounds` alternated rounds; the weights'
time against `alone`.

Run: python bench/upload_beside_retention.py [--weights-mib 1280] [--files 8]
     [--state-mib 6144] [--state-files 12] [--rounds 3] [--settle 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.upload_beside_state import (  # noqa: E402
    alternated,
    files_of,
    print_medians,
    size_arguments,
)
from rft.storage import CheckpointStore, LocalObjectStore  # noqa: E402
from rft.storage.payload import BytesPayload  # noqa: E402


@dataclass(frozen=True)
class Way:
    name: str
    prune: bool
    beside: bool  # the prune on a thread of its own, not before the upload


WAYS = [
    Way("alone", False, False),
    Way("behind the prune, as before", True, False),
    Way("beside the prune, now", True, True),
]


def one_round(
    way: Way, base: Path, data: memoryview, args: argparse.Namespace, round_no: int
) -> tuple[float, float | None]:
    """From the prune's asking to the weights durable, and to the prune's end."""
    root = base / f"r{round_no}-{way.name.replace(' ', '_').replace(',', '')}"
    checkpoints = CheckpointStore(LocalObjectStore(root), "b", "r")
    checkpoints.write(1, 1, None, payloads=files_of(data, args.files, args.weights_mib))
    checkpoints.write_part(1, "trainer_state", files_of(data, args.state_files, args.state_mib))
    checkpoints.write(2, 2, None, payloads={"marker": BytesPayload(b"v2")})
    os.sync()  # the old version was written long before: its pages are clean
    time.sleep(args.settle)  # and the disk has finished with it (a virtual disk goes on after sync)
    pruned: list[float] = []

    def prune() -> None:
        assert checkpoints.prune(1) == [1]
        pruned.append(time.perf_counter() - started)

    started = time.perf_counter()
    pruner = None
    if way.prune and not way.beside:
        prune()
    if way.prune and way.beside:
        pruner = threading.Thread(target=prune)
        pruner.start()
    checkpoints.upload(3, 3, None, payloads=files_of(data, args.files, args.weights_mib))
    weights_s = time.perf_counter() - started
    if pruner is not None:
        pruner.join()
    shutil.rmtree(root)
    os.sync()  # the next way starts with the disk's queue drained
    return weights_s, (pruned[0] if pruned else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size_arguments(parser)
    parser.add_argument("--settle", type=float, default=5.0)
    args = parser.parse_args()
    rows = list(alternated(WAYS, args, "upload-beside-retention-", one_round, "pruned_s"))
    print(
        f"\n{args.weights_mib} MiB of weights in {args.files} files go up while retention "
        f"deletes an old version of as many weights and {args.state_mib} MiB of training state "
        f"in {args.state_files} files; medians of {args.rounds} alternated rounds\n"
    )
    print_medians(WAYS, rows, ("prune asked -> weights durable", "the prune ended after"))


if __name__ == "__main__":
    main()
