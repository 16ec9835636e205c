"""The durable weight path, before and after: a version published -> loaded in an explorer's engine,
beside a raw copy of the same bytes through the same store.

In each checkout's own code (`--roots`, one process per checkout, its directory first on
sys.path): a `TorchTrainerEngine` holds the model; `TrainerCheckpointer.write` publishes a
version (the weights durable and verified-to-be: sha256 per file, manifest created), then the
explorer side's `load_version` (rft.consumers.explorer.weight_follower) fetches it, verifies
every file and loads it into a running hf rollout engine (into the download buffers the explorer
keeps from one version to the next, pinned for an engine on a GPU, where the checkout has them;
and, where it has one, with the prefetch that fetches a version's files while they are put up,
begun before the publish as the follower begins it once the last version is loaded). Timed per
version from the start of the publish: `published` (the manifest exists: announceable),
`loaded` (in the engine). The ceiling, measured in the same process right after each version:
the version's weights bytes through the same store without rft, `put_file` + `get_file` (a
file to a file), as one file and as `--raw-files` pieces moved at once, each piece going down
as soon as its put returns; the ratio is against the faster of the two. Beside it the same
pieces all up, then all down: the shape of a version, whose readers can start only after its
last file (the manifest commits them all). A version that carries the training state (AdamW moments, as `trainer.save_interval` makes due) is timed too:
until its weights are announceable, and until its training state is durable as well.

Models: `smollm2` (SmolLM2-135M-Instruct, float32, 538 MB of weights), `synthetic-1g`
(a random Llama of ~1 GiB float32: hidden 1024, 16 layers, MLP 4096) or `qwen2.5-1.5b-shape`
(random weights in Qwen2.5-1.5B's shape, for a GPU host: 2.6 GiB in bf16). Stores: `file` (a local
directory) and `s3` (the local stack's MinIO, `rft stack up`). Weights are nudged between
versions so every version's bytes differ. Medians over `--versions` per process; processes
alternate between checkouts for `--rounds` rounds.

Run: python bench/durable_weights.py --roots /tmp/rft-main . [--store file s3]
     [--model smollm2 synthetic-1g] [--versions 3] [--rounds 2] [--device cuda --dtype bfloat16]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

MODELS: dict[str, dict[str, Any]] = {
    "smollm2": {"name_or_path": "smollm2"},
    # random weights in Qwen2.5-1.5B's shape (2.6 GiB in bf16): a GPU host's size, not this CPU's
    "qwen2.5-1.5b-shape": {"name_or_path": "qwen2.5-1.5b-shape"},
    "synthetic-1g": {
        "name_or_path": "tiny",
        "options": {
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_hidden_layers": 16,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
        },
    },
}
OFFSETS = [("bench.experiences", 0, 1)]


def worker(args: argparse.Namespace) -> None:
    root = Path(args.root)
    sys.path.insert(0, str(root))
    import rft

    imported = Path(rft.__file__).resolve()
    if root.resolve() not in imported.parents:
        raise SystemExit(f"rft imported from {imported}, not from {root}")
    import torch

    from rft.consumers.explorer.weight_follower import load_version
    from rft.consumers.trainer.checkpoint import TrainerCheckpointer
    from rft.engines.models import ModelSpec, load_model
    from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
    from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine
    from rft.storage import CheckpointStore, open_object_store

    torch.set_num_threads(args.threads)
    spec = ModelSpec(dtype=args.dtype, device=args.device, **MODELS[args.model])
    model, tok = load_model(spec)
    trainer = TorchTrainerEngine(model, TorchTrainerConfig(lr=1e-5), tokenizer=tok)
    # moments exist only after a step: give AdamW its state as a real trainer has it
    for group in trainer.optimizer.param_groups:
        for p in group["params"]:
            p.grad = torch.zeros_like(p)
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    explorer = create_rollout_engine("hf", RolloutEngineConfig(model=spec))

    scratch = Path(tempfile.mkdtemp(prefix="rft-dw-"))
    run = f"dw-{uuid.uuid4().hex[:8]}"
    uri = f"file://{scratch}/store" if args.store == "file" else f"s3://rft-bench/{run}"
    objects = open_object_store(uri)
    objects.ensure_bucket()
    checkpoints = CheckpointStore(objects, "bench", run)
    # a version cut in other shards than the checkout's (more files: more of them land, and
    # can be fetched, before the last one is up)
    cut: dict[str, Any] = {}
    if args.shard_mib:
        cut["shard_bytes"] = args.shard_mib << 20
    if args.max_shards:
        import rft.engines.weights

        rft.engines.weights._MAX_SHARDS = args.max_shards  # read at each cut
    checkpointer = TrainerCheckpointer(checkpoints, save_interval=1_000_000, **cut)
    # before: the follower downloaded into a work directory; after: into memory
    takes = inspect.signature(load_version).parameters
    load_args: list[Any] = [scratch / "explorer"] if "workdir" in takes else []
    # since the explorer keeps its download buffers (pinned for a GPU engine), as its follower does
    if "buffers" in takes:
        from rft.consumers.explorer.weight_buffers import WeightBuffers

        load_args = [WeightBuffers(pinned=explorer.weights_on_gpu)]
    # since the explorer fetches the next version's files as they land, as its follower does
    prefetch_class: Any = None
    if "prefetched" in takes:
        from rft.storage.checkpoint_prefetch import VersionPrefetch as prefetch_class
    asked: list[float] = []  # when the prefetch found each file of the version landed

    def kept(name: str, size: int) -> Any:
        asked.append(time.perf_counter())
        return load_args[-1].kept(name, size)

    marks = _phase_marks(trainer, checkpoints)
    try:
        for version in range(1, 2 * args.versions + 2):
            with torch.no_grad():
                for p in trainer.model.parameters():
                    p.add_(torch.randn_like(p) * 1e-4)
            with_state = version > args.versions + 1  # the last ones carry the training state
            os.sync()  # each timed copy starts with no earlier copy's writeback still pending
            marks.clear()
            # begun once the last version is loaded, as the follower does (before the clock)
            prefetch = None
            asked.clear()
            if prefetch_class is not None and not with_state:
                prefetch = prefetch_class(checkpoints, version, kept)
            started = time.perf_counter()
            manifest = checkpointer.write(trainer, version, version - 1, OFFSETS, final=with_state)
            published = time.perf_counter()
            settle = getattr(checkpointer, "wait_for_state", None)
            if settle is not None:
                settle()  # the training state durable too (after: written in the background)
            state_durable = time.perf_counter()
            if not with_state:
                early = [] if prefetch is None else [prefetch.stop()]
                taken = load_version(explorer, checkpoints, version, *load_args, *early)
            loaded = time.perf_counter()
            if version == 1:
                continue  # warm-up: lazy imports, the allocator, the store's connections
            shards = [f for f in manifest.files if f.name.endswith(".safetensors")]
            weights = sum(f.size for f in shards)
            row: dict[str, Any] = {
                "version": version,
                "bytes": weights,
                "files": len(shards),
                "state": with_state,
            }
            if with_state:
                row["published"] = published - started
                row["state_durable"] = state_durable - started
            else:
                row["published"] = published - started
                row["loaded"] = loaded - started
                if prefetch is not None:
                    row["prefetched"] = taken  # files taken from the prefetch
                    row["first_landed"] = min(asked, default=loaded) - started
                # where `loaded` went: the phases' ends, from the same start
                for phase, at in marks.items():
                    row[phase] = at - started
                row["raw"] = _raw_copy(objects, trainer, scratch, 1)
                row["raw_parallel"] = _raw_copy(objects, trainer, scratch, args.raw_files)
                row["raw_staged"] = _raw_copy(
                    objects, trainer, scratch, args.raw_files, whole_first=True
                )
                got = explorer.model.state_dict()  # type: ignore[attr-defined]
                want = trainer.model.state_dict()
                if not all(torch.equal(got[k], want[k]) for k in want):
                    raise SystemExit(
                        f"v{version}: the explorer's weights differ from the trainer's"
                    )
            print(json.dumps(row), flush=True)
    finally:
        for info in objects.list(f"bench/{run}/"):
            objects.delete(info.key)
        objects.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _phase_marks(trainer: Any, checkpoints: Any) -> dict[str, float]:
    """When each phase of a version's trip ended, recorded by wrapping two calls every checkout
    makes: `exported` (the trainer's weights on the host), `uploaded` (every file in the store
    and hashed, the manifest not yet created) and `downloaded` (every file fetched and
    verified, before the explorer's engine gets them). The dict is filled per version."""
    marks: dict[str, float] = {}

    def marking(call: Any, phase: str) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = call(*args, **kwargs)
            marks.setdefault(phase, time.perf_counter())  # the first call: the version's own
            return out

        return wrapped

    trainer.export_weights = marking(trainer.export_weights, "exported")
    if hasattr(checkpoints, "upload"):
        checkpoints.upload = marking(checkpoints.upload, "uploaded")
    if hasattr(checkpoints, "read_files"):
        checkpoints.read_files = marking(checkpoints.read_files, "downloaded")
    return marks


def _raw_copy(
    objects: Any, trainer: Any, scratch: Path, files: int, whole_first: bool = False
) -> float:
    """The weights' bytes through the same store, without rft: put_file + get_file of each of
    `files` local files (the weights file cut in as many pieces), all at once when several;
    each piece goes down as soon as it is up, or with `whole_first` once every piece is up (a
    version's shape: its readers wait for the commit, after the last file)."""
    local = scratch / "raw" / "model.safetensors"
    local.parent.mkdir(parents=True, exist_ok=True)
    trainer.save_weights(local)  # untimed: the bytes are on the disk before the copy starts
    data = local.read_bytes()
    step = -(-len(data) // files)
    pieces = []
    for k in range(files):
        piece = local.parent / f"piece-{k}"
        piece.write_bytes(data[k * step : (k + 1) * step])
        pieces.append((piece, f"raw/{uuid.uuid4().hex}/piece-{k}", local.parent / f"copy-{k}"))
    del data
    os.sync()

    def copy(item: tuple[Path, str, Path]) -> None:
        objects.put_file(item[1], item[0])
        objects.get_file(item[1], item[2])

    started = time.perf_counter()
    with ThreadPoolExecutor(files) as pool:
        if whole_first:
            list(pool.map(lambda item: objects.put_file(item[1], item[0]), pieces))
            list(pool.map(lambda item: objects.get_file(item[1], item[2]), pieces))
        else:
            list(pool.map(copy, pieces))
    took = time.perf_counter() - started
    for _, key, _ in pieces:
        objects.delete(key)
    shutil.rmtree(local.parent)
    return took


def driver(args: argparse.Namespace) -> None:
    roots = [Path(r).resolve() for r in args.roots]
    label = {str(Path(k).resolve()): v for k, v in (i.split("=", 1) for i in args.label)}
    rows: dict[tuple[str, str, Path], list[dict[str, Any]]] = {}
    print("| model | store | round | checkout | load avg (1 min) | loaded / raw, each version |")
    print("|---|---|---|---|---|---|")
    for model in args.model:
        for store in args.store:
            for round_no in range(args.rounds):
                for root in roots if round_no % 2 == 0 else roots[::-1]:
                    load = os.getloadavg()[0]
                    done = subprocess.run(
                        [sys.executable, str(Path(__file__).resolve()), "--root", str(root)]
                        + ["--model", model, "--store", store, "--versions", str(args.versions)]
                        + ["--threads", str(args.threads), "--raw-files", str(args.raw_files)]
                        + ["--shard-mib", str(args.shard_mib), "--max-shards", str(args.max_shards)]
                        + ["--device", args.device, "--dtype", args.dtype],
                        cwd=root,
                        # the checkout first; what the environment adds (a GPU machine's wheels)
                        env={
                            **os.environ,
                            "PYTHONPATH": os.pathsep.join(
                                [str(root), *filter(None, [os.environ.get("PYTHONPATH")])]
                            ),
                        },
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                    if done.returncode != 0:
                        raise SystemExit(f"{root}: exit {done.returncode}\n{done.stderr[-3000:]}")
                    got = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
                    rows.setdefault((model, store, root), []).extend(got)
                    ratios = " / ".join(
                        f"{r['loaded'] / _ceiling(r):.2f}"
                        + (
                            f" ({r['prefetched']} files prefetched, the first seen at "
                            f"{r['first_landed']:.2f} s)"
                            if "prefetched" in r
                            else ""
                        )
                        for r in got
                        if not r["state"]
                    )
                    name = label.get(str(root), root.name)
                    print(
                        f"| {model} | {store} | {round_no + 1} | {name} | {load:.1f} | {ratios} |",
                        flush=True,
                    )
    print(
        f"\nmedians of {args.versions} versions x {args.rounds} processes per checkout "
        f"(torch threads {args.threads}), seconds from the start of the publish\n"
    )
    print(
        "| model | store | checkout | weights MiB (files) | published | loaded in the explorer "
        f"| raw copy, 1 file | raw copy, {args.raw_files} files at once | loaded / faster raw "
        f"| raw copy, {args.raw_files} files: all up, then all down | loaded / that "
        "| with training state: announceable | … state durable too |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (model, store, root), got in rows.items():
        plain = [r for r in got if not r["state"]]
        state = [r for r in got if r["state"]]

        def med(key: str, of: list[dict[str, Any]]) -> float:
            return statistics.median(r[key] for r in of)

        print(
            f"| {model} | {store} | {label.get(str(root), root.name)} "
            f"| {plain[0]['bytes'] / 2**20:.0f} ({plain[0].get('files', 1)}) "
            f"| {med('published', plain):.2f} "
            f"| {med('loaded', plain):.2f} | {med('raw', plain):.2f} "
            f"| {med('raw_parallel', plain):.2f} "
            f"| {statistics.median(r['loaded'] / _ceiling(r) for r in plain):.2f}× "
            f"| {med('raw_staged', plain):.2f} "
            f"| {statistics.median(r['loaded'] / r['raw_staged'] for r in plain):.2f}× "
            f"| {med('published', state):.2f} | {med('state_durable', state):.2f} |"
        )
    print(
        "\nwhere `loaded` goes (medians, seconds): taking the weights to the host; the files "
        "up and hashed; the manifest created (the commit); the explorer's download and "
        "verification; into its engine\n"
    )
    print(
        "| model | store | checkout | export | upload | commit | download + verify "
        "| into the engine |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (model, store, root), got in rows.items():
        plain = [
            r for r in got if not r["state"] and {"exported", "uploaded", "downloaded"} <= r.keys()
        ]
        if not plain:
            continue
        cells = [
            statistics.median(r["exported"] for r in plain),
            statistics.median(r["uploaded"] - r["exported"] for r in plain),
            statistics.median(r["published"] - r["uploaded"] for r in plain),
            statistics.median(r["downloaded"] - r["published"] for r in plain),
            statistics.median(r["loaded"] - r["downloaded"] for r in plain),
        ]
        print(
            f"| {model} | {store} | {label.get(str(root), root.name)} | "
            + " | ".join(f"{c:.3f}" for c in cells)
            + " |"
        )


def _ceiling(row: dict[str, Any]) -> float:
    """The raw copy to measure against: the faster of one file and several at once."""
    return float(min(row["raw"], row["raw_parallel"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="worker: the checkout to import rft from")
    parser.add_argument("--roots", nargs="+", help="driver: checkouts, before first")
    parser.add_argument("--model", nargs="+", default=["smollm2"], choices=sorted(MODELS))
    parser.add_argument("--store", nargs="+", default=["file", "s3"], choices=["file", "s3"])
    parser.add_argument("--versions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--raw-files", type=int, default=8, help="the parallel raw copy's number of files"
    )
    parser.add_argument(
        "--shard-mib",
        type=int,
        default=0,
        help="the trainer's weight shard size in MiB (0: the checkout's own)",
    )
    parser.add_argument(
        "--max-shards", type=int, default=0, help="at most this many shards (0: the checkout's)"
    )
    parser.add_argument("--device", default="cpu", help="trainer's and explorer's (cuda on a GPU)")
    parser.add_argument("--dtype", default="float32", help="of both engines' weights")
    parser.add_argument(
        "--label", action="append", default=[], help="ROOT=NAME, a checkout's name in the table"
    )
    args = parser.parse_args()
    if args.root:
        args.model, args.store = args.model[0], args.store[0]
        worker(args)
        return
    if not args.roots:
        parser.error("give --roots (driver) or --root (worker)")
    driver(args)


if __name__ == "__main__":
    main()
