"""A training state's write, two ways, and what it costs a Python thread running beside it.

The trainer writes a version's training state (AdamW moments: twice the float32 weights) on a
thread of its own while its main thread goes on with the next step, whose Python side (launching
kernels, building batches) needs the GIL. This bench times the write of a synthetic AdamW state
of `--gib` GiB to a local file store (`CheckpointStore.write_part`, sha256 and fsync as a version's
files get them), each way in alternated rounds:

- `torch.save buffer`: the state `torch.save`d into memory first, then that buffer uploaded (how
  rft wrote it before rft.engines.state_files);
- `streamed files`: `state_payloads` (every tensor into safetensors shards read straight from its
  memory, the rest into a small skeleton.pt), uploaded as they are.

Beside each write a thread counts in a pure-Python loop: its rate against the same loop with no
write running (the `alone` row) is the share of the interpreter the write leaves to a training
thread. Also printed: the peak of the process's resident memory above the state itself during the
write (the serialized copy, if any), and the thread's time lost: the write's seconds times the
share it did not get. Medians of `--rounds`.

Run: python bench/state_write.py [--gib 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import io
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rft.engines.state_files import state_payloads  # noqa: E402
from rft.storage import CheckpointStore, LocalObjectStore  # noqa: E402
from rft.storage.payload import BytesPayload, Payload  # noqa: E402


def adamw_state(gib: float) -> dict[str, Any]:
    """An AdamW state dict of `gib` GiB of moments over 16 parameters, as optimizers have it."""
    per = int(gib * 2**30 / 4 / 2 / 16)  # float32 elements per moment
    g = torch.Generator().manual_seed(0)
    return {
        "optimizer": {
            "state": {
                i: {
                    "step": torch.tensor(7.0),
                    "exp_avg": torch.randn(per, generator=g),
                    "exp_avg_sq": torch.rand(per, generator=g),
                }
                for i in range(16)
            },
            "param_groups": [{"lr": 1e-5, "betas": (0.9, 0.999), "params": list(range(16))}],
        },
        "scheduler": {"last_epoch": 7, "_last_lr": [1e-5]},
        "step": 7,
    }


def buffered(state: Any) -> dict[str, Payload]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return {"optimizer.pt": BytesPayload(buffer.getbuffer())}


def streamed(state: Any) -> dict[str, Payload]:
    return {f"optimizer/{name}": p for name, p in state_payloads(state).items()}


def rss_gib() -> float:
    """The process's resident memory now (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**30


class Spinner:
    """A thread counting in a Python loop until stopped (the interpreter share it got), and
    noting the process's largest resident memory meanwhile."""

    def __init__(self) -> None:
        self.count = 0
        self.peak = rss_gib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            for _ in range(2000):
                n += 1
            self.count = n
            if n % 200_000 == 0:
                self.peak = max(self.peak, rss_gib())

    def __enter__(self) -> Spinner:
        self._started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.rate = self.count / (time.perf_counter() - self._started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="size of the AdamW moments")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    state = adamw_state(args.gib)
    scratch = Path(tempfile.mkdtemp(prefix="rft-state-write-"))
    store = CheckpointStore(LocalObjectStore(scratch / "store"), "bench", "state")
    store.write(1, 1, None, payloads={"x.json": BytesPayload(b"{}")})
    ways = {"torch.save buffer": buffered, "streamed files": streamed}
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    rates: dict[str, list[float]] = {name: [] for name in (*ways, "alone")}
    above: dict[str, float] = {}
    part = 0
    try:
        for _ in range(args.rounds):
            with Spinner() as spinner:
                time.sleep(2.0)
            rates["alone"].append(spinner.rate)
            for name, files in ways.items():
                gc.collect()
                before = rss_gib()
                part += 1
                with Spinner() as spinner:
                    started = time.perf_counter()
                    store.write_part(1, f"state-{part}", files(state))
                    seconds[name].append(time.perf_counter() - started)
                rates[name].append(spinner.rate)
                above[name] = max(above.get(name, 0.0), spinner.peak - before)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    alone = statistics.median(rates["alone"])
    print(
        f"\nA {args.gib:g} GiB AdamW state written as a version's part to a local store, medians "
        f"of {args.rounds} alternated rounds; a Python thread counting beside the write\n"
    )
    print(
        "| way | write s | Python thread beside it (share of alone) | thread time lost, s "
        "| peak memory added, GiB |"
    )
    print("|---|---|---|---|---|")
    for name in ways:
        share = statistics.median(rates[name]) / alone
        took = statistics.median(seconds[name])
        lost = (1 - share) * took
        print(f"| {name} | {took:.2f} | {share:.0%} | {lost:.2f} | {above[name]:.2f} |")


if __name__ == "__main__":
    main()
