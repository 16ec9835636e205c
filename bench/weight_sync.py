"""Weight sync: a version published -> an explorer rolling out on it, beside a raw copy of the bytes.

The publisher (this process) holds SmolLM2 in the rollout dtype, nudges its weights, writes them
as a version through the real `CheckpointStore` (sha256 per file, manifest) and announces it on a
weights topic of the real broker. A follower process runs a rollout engine (hf or vllm) behind the
real `WeightFollower`: it polls the topic, downloads and verifies the version, loads it into the
running engine and rolls out one batch. Per version it reports, from the start of the upload:
announce sent, announce seen, weights loaded (ready to roll out), first rollout done. The ceiling
is the same bytes through the same store without rft (put_file + get_file of the safetensors).
All clocks are time.time() on one machine. Medians over --versions.

Run: `python bench/weight_sync.py --engine hf|vllm [--bootstrap 127.0.0.1:39092]
      [--store file:///tmp/rft-ws] [--versions 5] [--device cuda --dtype bfloat16]`
(the broker must be up: `rft stack up`, or Kafka alone as infra/gpu does).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import torch

from rft.config.connections import KafkaSettings
from rft.engines.models import ModelSpec, load_model
from rft.engines.rollout import RolloutEngineConfig, SamplingParams, create_rollout_engine
from rft.engines.weights import export_state_dict
from rft.events.models import ManifestEntry, WeightVersion
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.storage.checkpoint_store import CheckpointStore
from rft.storage.object_store import open_object_store

PROMPT = [{"role": "user", "content": "What is 12 + 30?"}]


def follower(args: argparse.Namespace, topic: str, ready: Any, results: Any) -> None:
    from rft.consumers.explorer.weight_follower import WeightFollower

    spec = ModelSpec(args.model, dtype=args.dtype, device=args.device)
    options = {"gpu_memory_utilization": 0.4} if args.engine == "vllm" else {}
    engine = create_rollout_engine(args.engine, RolloutEngineConfig(model=spec, options=options))
    prompt = engine.chat_prompt_ids(PROMPT)
    params = SamplingParams(temperature=1.0, max_tokens=16, n=8)
    engine.generate([prompt], params)  # warm: kernels, graphs, allocator
    store = CheckpointStore(open_object_store(args.store), "bench", args.run)
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    with WeightFollower(kafka, topic, f"ws-{uuid.uuid4().hex[:6]}", store) as weights:
        ready.set()
        done = 0
        while done < args.versions:
            latest = weights.poll(timeout_s=0.01)
            if latest is None or latest.version <= engine.model_version:
                continue
            seen = time.time()
            if not weights.load(engine, latest.version):
                results.put({"version": latest.version, "error": weights.refused})
                return
            loaded = time.time()
            engine.generate([prompt], params)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            results.put(
                {
                    "version": latest.version,
                    "seen": seen,
                    "loaded": loaded,
                    "rolled": time.time(),
                    "engine_update_s": getattr(engine, "last_update_seconds", None),
                }
            )
            done += 1


def raw_copy_seconds(store_uri: str, path: Path, scratch: Path) -> float:
    store = open_object_store(store_uri)
    store.ensure_bucket()
    key = f"raw/{uuid.uuid4().hex}/model.safetensors"
    started = time.time()
    store.put_file(key, path)
    store.get_file(key, scratch / "copy.safetensors")
    return time.time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="hf")
    parser.add_argument("--bootstrap", default="127.0.0.1:39092")
    parser.add_argument("--store", default="file:///tmp/rft-weight-sync")
    parser.add_argument("--versions", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--model", default="smollm2")
    args = parser.parse_args()
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    args.run = f"ws-{uuid.uuid4().hex[:8]}"
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    topic = f"bench.{args.run}.weights"
    ensure_topics(kafka, [topic])

    ctx = mp.get_context("spawn")
    ready, results = ctx.Event(), ctx.Queue()
    child = ctx.Process(target=follower, args=(args, topic, ready, results))
    child.start()
    model, _ = load_model(ModelSpec(args.model, dtype=args.dtype, device=args.device))
    store = CheckpointStore(open_object_store(args.store), "bench", args.run)
    writer = EventWriter.open(kafka)
    if not ready.wait(timeout=900):
        raise SystemExit("the follower did not start")
    scratch = Path(tempfile.mkdtemp(prefix="rft-ws-"))
    rows = []
    raw = []
    try:
        from safetensors.torch import save_file

        for version in range(1, args.versions + 1):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 1e-3)
            local = scratch / f"v{version}"
            local.mkdir()
            started = time.time()
            tensors = {k: v.contiguous().cpu() for k, v in export_state_dict(model).items()}
            save_file(tensors, str(local / "model.safetensors"))
            manifest = store.write(version, version, local)
            writer.send(
                topic,
                WeightVersion(
                    version=version,
                    train_step=version,
                    uri=store.uri(version),
                    manifest=tuple(ManifestEntry(f.name, f.size, f.sha256) for f in manifest.files),
                ),
                key=b"weights",
            )
            writer.flush()
            announced = time.time()
            got = results.get(timeout=600)
            if "error" in got:
                raise SystemExit(f"version refused: {got['error']}")
            raw.append(raw_copy_seconds(args.store, local / "model.safetensors", scratch))
            rows.append(
                {
                    "publish": announced - started,
                    "seen": got["seen"] - started,
                    "loaded": got["loaded"] - started,
                    "rolled": got["rolled"] - started,
                    "engine_update": got["engine_update_s"],
                    "bytes": manifest.total_size,
                }
            )
            shutil.rmtree(local)
    finally:
        writer.close()
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
        shutil.rmtree(scratch, ignore_errors=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    raw_s = statistics.median(raw)
    print(
        f"\n## weight sync, engine {args.engine}, {args.dtype} on {args.device}, store {args.store}"
    )
    print(f"version size {rows[0]['bytes'] / 2**20:.0f} MiB; medians of {len(rows)} versions\n")
    print("| from the start of the upload to | seconds | / raw copy |")
    print("|---|---|---|")
    for key, what in (
        ("publish", "announced (upload + sha256 + manifest + event)"),
        ("seen", "the explorer sees the announcement"),
        ("loaded", "loaded: downloaded, verified, in the running engine"),
        ("rolled", "first rollout on it done (8 × 16 tokens)"),
    ):
        print(f"| {what} | {med(key):.3f} | {med(key) / raw_s:.2f}× |")
    print(
        f"| raw copy of the same bytes through the same store (put + get) | {raw_s:.3f} | 1.00× |"
    )
    updates = [r["engine_update"] for r in rows if r["engine_update"] is not None]
    if updates:
        print(
            f"\nin-engine weight update alone (median): {statistics.median(updates) * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
