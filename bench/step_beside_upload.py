"""A training step beside a version's upload: how much slower is the step, and why.

In `fully_async` the trainer takes version N (`TrainerCheckpointer.begin`: the weights copied
to the host), trains step N+1 while version N's files go up on the checkpoint writer's threads,
then lands N (`land`). On two H100s the fsdp2 trainer's step took 7.1 s there against 5.6 s in
`fixed`, where the upload is done before the next step starts. This bench runs the same step in
one process, alternating in rounds between what runs beside it:

- `alone`: nothing (what `fixed` has);
- `upload`: the real path: `begin` before the step, its upload beside it, `land` after (the
  wait for the upload after the step is reported apart);
- `disk`: another process writing the version's bytes (1 GiB until an `upload` way has run) to
  the same disk with an fsync (the page cache and the disk, without our interpreter's lock);
- `cpu`: --cpu-procs other processes spinning (the host's cores taken, as a busy explorer's
  processes take them, without our interpreter's lock);
- `other_gpu`: another process multiplying bf16 matrices on the next GPU for the step's length
  (what the explorer's rollouts do beside the step in `fully_async`; needs 2 GPUs);
- `together`: `upload`, `cpu` and `other_gpu` at once, as they run beside a `fully_async` step;
- `python` (not in the default ways): a thread of this process spinning in pure Python, the
  interpreter lock alone. Every torch op gives the lock up and takes it back, so the step waits
  for the spinner's switch interval at each op: on an H100 one fsdp2 step of the 1.5B shape beside
  it did not finish within the rest of a 230 s bench (5.5 s beside the upload).

Medians of --rounds steps per way; the ratio is against `alone` in the same run. Beside each
step time, the CPU seconds of the step's own thread: a step slower with the same CPU time waited
(for the GPU, or for the interpreter lock); one slower with more ran on a slower or shared core. Random weights
in a published model's shape (bench.fsdp_step's SHAPES, SmolLM2's vocabulary by default):
throughput only, no learning claim.

Run (GPU): python -m bench.step_beside_upload --engine fsdp2 --device cuda --bf16
Run (CPU): python -m bench.step_beside_upload --engine torch --device cpu --model tiny \
    --sequences 8 --prompt 16 --response 32 --micro-batch 4
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench.fsdp_step import SHAPES, PolicyGradientLoss, random_batch, random_model

WAYS = ("alone", "upload", "disk", "cpu", "other_gpu", "together", "python")
DEFAULT_WAYS = ("alone", "upload", "disk", "cpu", "other_gpu")
OFFSETS = [("bench.experiences", 0, 1)]

# a child that writes `size` bytes in 8 MiB pieces and fsyncs them: the disk's share of an upload
_WRITER = """
import os, sys
size, path = int(sys.argv[1]), sys.argv[2]
piece = os.urandom(8 << 20)
with open(path, "wb") as out:
    left = size
    while left > 0:
        left -= out.write(piece[: min(left, len(piece))])
    out.flush()
    os.fsync(out.fileno())
os.unlink(path)
"""

# a child that keeps the GPU it is given busy with bf16 matmuls until it is killed
_GPU_LOAD = """
import sys, torch
device = sys.argv[1]
a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
print("ready", flush=True)
while True:
    for _ in range(20):
        a = (a @ b).clamp_(-1, 1)
    torch.cuda.synchronize(device)
"""

# a child that spins in pure Python until it is killed (one core)
_SPIN = "while True: pass"


def engine_for(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    from rft.engines.trainer import TRAINER_ENGINES, TorchTrainerConfig, TrainerPlacement

    shape = {**SHAPES[args.model], "vocab_size": args.vocab}
    device = "cuda:0" if args.device == "cuda" else "cpu"
    config = TorchTrainerConfig(
        lr=1e-6,
        micro_batch_size=args.micro_batch,
        autocast_dtype="bfloat16" if args.bf16 else None,
        gradient_checkpointing=args.grad_ckpt,
    )
    model = random_model(shape, device)
    engine = TRAINER_ENGINES.get(args.engine)(model, None, config, TrainerPlacement((device,)))
    return engine, shape


class Beside:
    """What runs beside one step: started before it, stopped after it."""

    def __init__(self, start: Callable[[], None], stop: Callable[[], dict[str, float]]) -> None:
        self.start = start
        self.stop = stop


def nothing() -> Beside:
    return Beside(lambda: None, lambda: {})


def spinning_python() -> Beside:
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    thread = threading.Thread(target=spin, daemon=True)

    def halt() -> dict[str, float]:
        stop.set()
        thread.join()
        return {}

    return Beside(thread.start, halt)


def disk_writer(size: int, directory: Path) -> Beside:
    child: list[subprocess.Popen[bytes]] = []
    path = directory / f"disk-{uuid.uuid4().hex[:8]}"

    def start() -> None:
        child.append(subprocess.Popen([sys.executable, "-c", _WRITER, str(size), str(path)]))

    def halt() -> dict[str, float]:
        started = time.perf_counter()
        child[0].wait()
        return {"after_s": time.perf_counter() - started}

    return Beside(start, halt)


def children(argv: list[str], count: int, ready: bool = False) -> Beside:
    """`count` child processes of `argv` from before the step until after it."""
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        for _ in range(count):
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE if ready else None))
        for proc in procs if ready else ():
            assert proc.stdout is not None
            proc.stdout.readline()  # the load is running before the step starts

    def halt() -> dict[str, float]:
        for proc in procs:
            proc.kill()
            proc.wait()
        return {}

    return Beside(start, halt)


def together(parts: list[Beside]) -> Beside:
    def start() -> None:
        for part in parts:
            part.start()

    def halt() -> dict[str, float]:
        out: dict[str, float] = {}
        for part in parts:
            out |= part.stop()
        return out

    return Beside(start, halt)


def version_upload(checkpointer: Any, engine: Any, version: int) -> Beside:
    marks: dict[str, float] = {}

    def start() -> None:
        started = time.perf_counter()
        checkpointer.begin(engine, version, version - 1, OFFSETS, final=False)
        marks["take_s"] = time.perf_counter() - started

    def halt() -> dict[str, float]:
        started = time.perf_counter()
        checkpointer.land()
        return {**marks, "after_s": time.perf_counter() - started}

    return Beside(start, halt)


def add_step_args(parser: argparse.ArgumentParser) -> None:
    """The step's engine, model shape and batch: the 1.5B-shape loop's sizes by default."""
    parser.add_argument("--engine", default="fsdp2", choices=("torch", "fsdp2"))
    parser.add_argument("--model", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    parser.add_argument("--vocab", type=int, default=49152, help="SmolLM2's, as the loop's model")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--grad-ckpt", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--sequences", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=40)
    parser.add_argument("--response", type=int, default=256)
    parser.add_argument("--micro-batch", type=int, default=16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_args(parser)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ways", default=",".join(DEFAULT_WAYS))
    parser.add_argument("--cpu-procs", type=int, default=8, help="the `cpu` way's spinners")
    parser.add_argument("--dir", default=None, help="the local store's directory (a temp dir)")
    args = parser.parse_args()
    ways = args.ways.split(",")
    if unknown := set(ways) - set(WAYS):
        parser.error(f"--ways: unknown {sorted(unknown)}; known: {', '.join(WAYS)}")
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    if "other_gpu" in ways and gpus < 2:
        ways.remove("other_gpu")
        print("other_gpu left out: it needs a second GPU", file=sys.stderr)

    from rft.consumers.trainer.checkpoint import TrainerCheckpointer
    from rft.storage import CheckpointStore, open_object_store

    engine, shape = engine_for(args)
    loss = PolicyGradientLoss()
    scratch = Path(tempfile.mkdtemp(prefix="rft-sbu-", dir=args.dir))
    objects = open_object_store(f"file://{scratch}/store")
    objects.ensure_bucket()
    checkpointer = TrainerCheckpointer(
        CheckpointStore(objects, "bench", "sbu"),
        save_interval=1_000_000,
        weights_dtype=torch.bfloat16 if args.bf16 else None,
    )
    cuda = args.device == "cuda"
    version = 0
    rows: dict[str, list[dict[str, float]]] = {way: [] for way in ways}
    version_bytes = 0
    ways_of: dict[str, Callable[[], Beside]] = {
        "alone": nothing,
        "upload": lambda: version_upload(checkpointer, engine, version),
        "disk": lambda: disk_writer(version_bytes or 1 << 30, scratch),
        "cpu": lambda: children([sys.executable, "-c", _SPIN], args.cpu_procs),
        "other_gpu": lambda: children([sys.executable, "-c", _GPU_LOAD, "cuda:1"], 1, ready=True),
        "python": spinning_python,
    }
    ways_of["together"] = lambda: together(
        [ways_of[w]() for w in ("upload", "cpu", "other_gpu") if w != "other_gpu" or gpus > 1]
    )
    try:
        for round_ in range(args.rounds + 1):  # round 0 warms up every way
            for way in ways:
                version += 1
                beside = ways_of[way]()
                batch = random_batch(
                    args.sequences, args.prompt, args.response, shape["vocab_size"], version
                )
                beside.start()
                started, thread_cpu = time.perf_counter(), time.thread_time()
                engine.train_step(batch, loss)
                if cuda:
                    torch.cuda.synchronize()
                step_s = time.perf_counter() - started
                thread_cpu_s = time.thread_time() - thread_cpu
                extra = beside.stop()
                if way in ("upload", "together") and not version_bytes:
                    version_bytes = sum(
                        f.size for f in checkpointer.store.read_manifest(version).files
                    )
                row = {"step_s": step_s, "thread_cpu_s": thread_cpu_s, **extra}
                print(f"ROW round={round_} way={way} {row}", flush=True)
                if round_:
                    rows[way].append(row)
    finally:
        engine.close()
        objects.close()
        shutil.rmtree(scratch, ignore_errors=True)

    base = statistics.median(r["step_s"] for r in rows["alone"]) if "alone" in rows else None
    print(
        f"\n{args.engine} engine, {args.model} shape (random weights, vocab {args.vocab}), "
        f"{args.device}, {'bf16 autocast' if args.bf16 else 'fp32'}, "
        f"{'gradient checkpointing, ' if args.grad_ckpt else ''}{args.sequences} x "
        f"({args.prompt} + {args.response}) tokens, micro-batch {args.micro_batch}; a version "
        f"is {version_bytes / 2**20:,.0f} MiB; medians of {args.rounds} rounds"
    )
    print(
        "\n| beside the step | step time | vs alone | the step thread's CPU time "
        "| take before | wait after |"
    )
    print("|---|---|---|---|---|---|")
    for way, got in rows.items():
        step = statistics.median(r["step_s"] for r in got)
        thread_cpu = statistics.median(r["thread_cpu_s"] for r in got)
        take = [r["take_s"] for r in got if "take_s" in r]
        after = [r["after_s"] for r in got if "after_s" in r]
        print(
            f"| {way} | {step:.2f} s | "
            f"{'' if base is None else f'{step / base:.2f}x'} | {thread_cpu:.2f} s | "
            f"{f'{statistics.median(take):.2f} s' if take else '-'} | "
            f"{f'{statistics.median(after):.2f} s' if after else '-'} |"
        )


if __name__ == "__main__":
    main()
