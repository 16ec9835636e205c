"""The fast weight path against the durable one, in the same run: a version sent -> serving.

The trainer side (this process) holds a `TorchTrainerEngine` and publishes versions with
`TrainerCheckpointer.write`, with the weight-sync group (`--sync-method nccl`: broadcast first,
then the store; `memory`: the version's memory shared with the explorer, then the store) on odd
versions and without it (the store only) on even ones. The explorer side is
a process of its own (`--explorer`): a `WeightGroupMember` and a rollout engine that loads each
version from the group when it comes that way, and from the store (`load_version`, every file's
sha256 verified) once its manifest exists. Each version is timed from the start of the write
(`announce`) to:
- `fast`: the weights in the explorer's engine from the group (serving them);
- `durable`: the weights in the explorer's engine from the store; for a version that also went
  over the group, its durable copy is written after the broadcast, so its `durable` shows what the
  commit rule waits for, and the even versions show the store path alone.
The explorer checks that the weights it got from the group equal the store's (sha256 of every
tensor). Medians over `--versions` of each kind, after one warm-up version of each.

Run: python bench/fast_weights.py [--model smollm2|tiny] [--store s3|file] [--versions 3]
     [--sync-method nccl|memory]
     [--device cuda --explorer-device cuda:1 --dtype bfloat16 --engine vllm]
On GPUs NCCL needs the trainer and the explorer on different devices (two GPUs); `memory` (CUDA
IPC) also works with both on one GPU (`--device cuda:0 --explorer-device cuda:0`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OFFSETS = [("bench.experiences", 0, 1)]
JOIN_TIMEOUT_S = 300.0
# the explorer side's lines for the trainer side start with this; anything else on its stdout
# (vLLM logs there) is passed on to stderr
PROTOCOL = "@bench "


def digest(tensors: dict[str, Any]) -> str:
    import torch

    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def protocol_line(stream: IO[str]) -> str:
    """The explorer side's next line for the trainer side ("" once it has ended)."""
    for line in stream:
        if line.startswith(PROTOCOL):
            return line[len(PROTOCOL) :].strip()
        sys.stderr.write(line)
    return ""


def explorer(args: argparse.Namespace) -> None:
    """The explorer side: prints one JSON line per version with the wall times it loaded it."""
    import torch

    from rft.consumers.explorer.weight_follower import load_version
    from rft.engines.models import ModelSpec
    from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
    from rft.engines.weights import tensors_of_files
    from rft.storage import CheckpointStore, open_object_store
    from rft.synchronizer.weight_group import WeightGroupMember

    torch.set_num_threads(args.threads)
    spec = ModelSpec(
        name_or_path=args.model, dtype=args.dtype, device=args.explorer_device or args.device
    )
    options = {"gpu_memory_utilization": 0.4} if args.engine == "vllm" else {}
    engine = create_rollout_engine(args.engine, RolloutEngineConfig(model=spec, options=options))
    member = WeightGroupMember(
        args.address, 60.0, "bench-explorer", device=spec.device, sync_method=args.sync_method
    )
    checkpoints = CheckpointStore(open_object_store(args.uri), "bench", args.run)
    print(f"{PROTOCOL}ready", flush=True)
    for version in range(1, args.total + 1):
        row: dict[str, Any] = {"version": version}
        received = None
        looked = 0.0
        while True:
            got = member.take()
            if got is not None and got.version == version:
                engine.load_state_dict(got.tensors, version)
                row["fast_at"] = time.time()
                received = got.tensors  # checked once the version is durable: off the clock
            # the store is asked every 50 ms: a request holds the GIL that the receiving
            # thread needs between tensors
            if time.monotonic() - looked > 0.05:
                looked = time.monotonic()
                if checkpoints.has_manifest(version):
                    break
            time.sleep(0.002)
        got = member.take()  # sent, and its manifest written, before a look at the group
        if got is not None and got.version == version:
            engine.load_state_dict(got.tensors, version)
            row["fast_at"] = time.time()
            received = got.tensors
        load_version(engine, checkpoints, version)
        row["durable_at"] = time.time()
        if received is not None:
            _, files = checkpoints.read_files(version, skip_prefixes=("trainer_state/",))
            stored = tensors_of_files(files, checkpoints.uri(version))
            if digest(stored) != digest(received):
                raise SystemExit(f"v{version}: the weights from the group differ from the store's")
        print(PROTOCOL + json.dumps(row), flush=True)
    member.close()


def trainer(args: argparse.Namespace) -> None:
    import torch

    from rft.consumers.trainer.checkpoint import TrainerCheckpointer
    from rft.engines.fsdp_ranks import free_port
    from rft.engines.models import ModelSpec, load_model
    from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine
    from rft.storage import CheckpointStore, open_object_store
    from rft.synchronizer.weight_group import WeightGroupHost

    torch.set_num_threads(args.threads)
    spec = ModelSpec(name_or_path=args.model, dtype="float32", device=args.device)
    model, tok = load_model(spec)
    engine = TorchTrainerEngine(model, TorchTrainerConfig(lr=1e-5), tokenizer=tok)
    rounded = getattr(torch, args.dtype) if args.dtype != "float32" else None
    scratch = Path(tempfile.mkdtemp(prefix="rft-fw-"))
    run = f"fw-{uuid.uuid4().hex[:8]}"
    uri = f"file://{scratch}/store" if args.store == "file" else f"s3://rft-bench/{run}"
    objects = open_object_store(uri)
    objects.ensure_bucket()
    checkpoints = CheckpointStore(objects, "bench", run)
    address = f"127.0.0.1:{free_port()}"
    host = WeightGroupHost(address, 60.0, device=args.device, sync_method=args.sync_method)
    fast = TrainerCheckpointer(checkpoints, 1_000_000, weights_dtype=rounded, fast=host)
    durable = TrainerCheckpointer(checkpoints, 1_000_000, weights_dtype=rounded)
    total = 2 * (args.versions + 1)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    explorer_device = args.explorer_device
    if explorer_device.startswith("cuda:"):
        # as rft's launchers place an explorer: its GPU is the only one it sees (vLLM refuses
        # any device but cuda:0)
        env["CUDA_VISIBLE_DEVICES"] = explorer_device.split(":", 1)[1]
        explorer_device = "cuda:0"
    child = subprocess.Popen(  # noqa: S603 - this script
        [sys.executable, __file__, "--explorer", "--address", address, "--uri", uri]
        + ["--run", run, "--total", str(total), "--model", args.model, "--dtype", args.dtype]
        + ["--device", args.device, "--engine", args.engine, "--threads", str(args.threads)]
        + ["--sync-method", args.sync_method]
        + (["--explorer-device", explorer_device] if explorer_device else []),
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    rows: list[dict[str, Any]] = []
    try:
        if protocol_line(child.stdout) != "ready":
            raise SystemExit("the explorer side did not start")
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        warm = engine.export_weights(rounded)
        while "bench-explorer" not in host.send(0, 0, warm):  # version 0: never loaded
            if time.monotonic() > deadline:
                raise SystemExit("the explorer never joined the weight-sync group")
            time.sleep(0.2)
        for version in range(1, total + 1):
            with torch.no_grad():
                for p in engine.model.parameters():
                    p.add_(torch.randn_like(p) * 1e-4)
            over_group = version % 2 == 1
            started = time.time()
            manifest = (fast if over_group else durable).write(
                engine, version, version - 1, OFFSETS, final=False
            )
            written = time.time()
            line = protocol_line(child.stdout)
            if not line:
                raise SystemExit(f"the explorer side ended before version {version}")
            got = json.loads(line)
            if version <= 2:
                continue  # warm-up of each kind: lazy imports, allocators, connections
            size = sum(f.size for f in manifest.files if f.name.endswith(".safetensors"))
            row: dict[str, Any] = {"version": version, "group": over_group, "bytes": size}
            row["written"] = written - started
            row["durable"] = got["durable_at"] - started
            if "fast_at" in got:
                row["fast"] = got["fast_at"] - started
            elif over_group:
                raise SystemExit(f"v{version} was sent over the group and never arrived")
            rows.append(row)
            print(json.dumps(row), flush=True)
        child.wait(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
        fast.close()
        durable.close()
        for info in objects.list(f"bench/{run}/"):
            objects.delete(info.key)
        objects.close()
        shutil.rmtree(scratch, ignore_errors=True)
    report(args, rows)


def report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    def med(of: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in of)

    grouped = [r for r in rows if r["group"]]
    alone = [r for r in rows if not r["group"]]
    print(
        f"\n{args.model}, {grouped[0]['bytes'] / 2**20:.0f} MiB of {args.dtype} weights, "
        f"store {args.store}, trainer {args.device}, explorer "
        f"{args.explorer_device or args.device} ({args.engine}), medians of {args.versions} "
        f"versions each, seconds from the start of the version's write\n"
    )
    print("| path | serving in the explorer | manifest written | durable in the explorer |")
    print("|---|---|---|---|")
    print(
        f"| fast ({args.sync_method}, then the store) | {med(grouped, 'fast'):.2f} "
        f"| {med(grouped, 'written'):.2f} | {med(grouped, 'durable'):.2f} |"
    )
    print(
        f"| durable only (the store) | {med(alone, 'durable'):.2f} "
        f"| {med(alone, 'written'):.2f} | {med(alone, 'durable'):.2f} |"
    )
    print(
        f"\nfast path: serving {med(alone, 'durable') / med(grouped, 'fast'):.1f}× sooner than "
        "through the store"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--explorer", action="store_true", help="(the explorer side's process)")
    parser.add_argument("--model", default="smollm2", help="smollm2, tiny, or a path")
    parser.add_argument("--store", default="s3", choices=["file", "s3"])
    parser.add_argument("--versions", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="the trainer's (cuda on a GPU)")
    parser.add_argument("--explorer-device", default="", help="default: --device")
    parser.add_argument("--dtype", default="float32", help="of the published weights")
    parser.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    parser.add_argument(
        "--sync-method",
        default="nccl",
        choices=["nccl", "memory"],
        help="the weight-sync group's transport: broadcasts, or memory shared on one host",
    )
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--uri", help=argparse.SUPPRESS)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--total", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.explorer:
        explorer(args)
    else:
        trainer(args)


if __name__ == "__main__":
    main()
