"""Where a version's upload to a local file store goes: the same bytes put several ways.

A version's weights leave the trainer as buffers in host memory, cut into `--files` files, and
go up several at once (`CheckpointStore.upload`: a Sha256Reader over each, `put_stream`, fsync
before the rename). This bench puts `--mib` MiB of random bytes cut the same way, in alternated
rounds, each way:

- `raw put_file`: the bytes as local files first (untimed), then `put_file` of each at once: the
  raw copy's upload half in bench/durable_weights.py;
- `put_stream`: from memory, no digest;
- `put_stream + sha256`: from memory through `Sha256Reader`, as a version's files go;
- `CheckpointStore.upload`: the whole staging of a version (object directory, digests, the
  manifest's entries), and again with `--small` extra small files beside the weights as a
  model's config and tokenizer files are;
- `put_stream, no fsync`: not durable, so never what rft does: how much of the time the fsync is.

With `--busy`, a thread runs a pure-Python loop beside each way, as a trainer's step does beside
its version's upload in `fully_async`: the upload's threads then wait for the interpreter lock
at every piece they hand over.

Medians of `--rounds`, seconds, and each against `raw put_file`.

Run: python bench/store_put.py [--mib 257] [--files 8] [--small 6] [--rounds 5] [--dir DIR] [--busy]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.state_write import Spinner  # noqa: E402
from rft.storage import CheckpointStore, LocalObjectStore  # noqa: E402
from rft.storage.checkpoint_store import TRANSFER_THREADS  # noqa: E402
from rft.storage.payload import BytesPayload, Payload, Sha256Reader  # noqa: E402


def _at_once(work: Callable[[int], object], count: int) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(min(count, TRANSFER_THREADS)) as pool:
        list(pool.map(work, range(count)))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=257, help="bytes of weights, MiB")
    parser.add_argument("--files", type=int, default=8, help="weight files they are cut into")
    parser.add_argument("--small", type=int, default=6, help="small files beside (upload only)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the store lives (default: a tmp dir)")
    parser.add_argument("--busy", action="store_true", help="a pure-Python thread beside each way")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="rft-put-", dir=args.dir))
    store = LocalObjectStore(scratch / "store")
    store.ensure_bucket()
    checkpoints = CheckpointStore(store, "bench", "put")
    rng = np.random.default_rng(0)
    step = args.mib * 2**20 // args.files
    pieces = [memoryview(rng.integers(0, 255, step, dtype=np.uint8)) for _ in range(args.files)]
    small = {f"small-{k}.json": BytesPayload(os.urandom(64 << 10)) for k in range(args.small)}
    sources = scratch / "sources"
    sources.mkdir()
    for k, piece in enumerate(pieces):
        (sources / f"piece-{k}").write_bytes(piece)

    def key(k: int) -> str:
        return f"v/{uuid.uuid4().hex}/piece-{k}"

    def raw(k: int) -> None:
        store.put_file(key(k), sources / f"piece-{k}")

    def plain(k: int) -> None:
        store.put_stream(key(k), BytesPayload(pieces[k]).open(), step)

    def hashed(k: int) -> None:
        reader = Sha256Reader(BytesPayload(pieces[k]).open())
        store.put_stream(key(k), reader, step)
        reader.hexdigest()

    version = iter(range(1, 1_000_000))

    def staged(with_small: bool) -> float:
        payloads: dict[str, Payload] = {
            f"w-{k}.safetensors": BytesPayload(p) for k, p in enumerate(pieces)
        }
        if with_small:
            payloads.update(small)
        started = time.perf_counter()
        checkpoints.upload(next(version), 0, None, payloads=payloads)
        return time.perf_counter() - started

    def unsynced() -> float:
        with mock.patch("os.fsync"):
            return _at_once(plain, args.files)

    ways: dict[str, Callable[[], float]] = {
        "raw put_file": lambda: _at_once(raw, args.files),
        "put_stream": lambda: _at_once(plain, args.files),
        "put_stream + sha256": lambda: _at_once(hashed, args.files),
        "CheckpointStore.upload": lambda: staged(False),
        f"CheckpointStore.upload (+{args.small} small files)": lambda: staged(True),
        "put_stream, no fsync (not durable)": unsynced,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for round_no in range(args.rounds + 1):
            order = list(ways) if round_no % 2 == 0 else list(ways)[::-1]
            for name in order:
                os.sync()  # no earlier way's writeback still pending
                with Spinner() if args.busy else contextlib.nullcontext():
                    took = ways[name]()
                if round_no:  # the first round warms the page cache and the allocator
                    times[name].append(took)
                shutil.rmtree(scratch / "store" / "v", ignore_errors=True)
                shutil.rmtree(scratch / "store" / "bench", ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ceiling = statistics.median(times["raw put_file"])
    print(
        f"\n{args.mib} MiB in {args.files} files, {TRANSFER_THREADS} at once; medians of "
        f"{args.rounds} rounds{'; a pure-Python thread beside' if args.busy else ''}\n"
    )
    print("| way | seconds | GB/s | / raw put_file |")
    print("|---|---|---|---|")
    for name, got in times.items():
        med = statistics.median(got)
        print(f"| {name} | {med:.3f} | {args.mib * 2**20 / med / 1e9:.2f} | {med / ceiling:.2f}× |")


if __name__ == "__main__":
    main()
