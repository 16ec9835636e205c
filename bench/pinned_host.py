"""A trainer's first training-state take against its later ones: the pinned host memory.

A version that carries the training state copies it off the GPU on the step's path
(rft.engines.state_snapshot: non-blocking copies into pinned memory from torch's caching host
allocator, one synchronize). At the 1.5B shape the first such take cost 10-16 s on an H100
machine and the later ones 0.4 s: the first allocates ~18 GB of page-locked memory. This bench
takes a state of Qwen2.5-1.5B's shape (float32 AdamW moments and master weights: three copies of
the parameters; SmolLM2's vocabulary) off a GPU three times, in a fresh process per way of
getting the memory:

- `default`: torch's caching host allocator as it comes;
- `host register, 8 threads`: PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True,
  pinned_num_register_threads:8 (ordinary pages, registered with the driver by 8 threads);
- `reserved beforehand`: the same blocks allocated and freed by a thread started before the
  first step (as a trainer could while it waits for its first batch), timed on its own;
- `rft engine, nothing set aside` / `rft engine, set aside at start`: rft's TorchTrainerEngine on
  the model of that shape (float32 masters), taking what a version with the training state
  takes (`export_weights` in bf16, `training_state()`, the float32 masters) without and with
  `reserve_version_copies(bfloat16, with_master=True)` first, as the trainer calls it at start;
- `fsdp2 engine, …`: the same through rft's fsdp2 engine on one rank (FSDP2 shards, a
  world of one): torch's `get_*_state_dict(full_state_dict=True, cpu_offload=True)` with the
  bf16 cast on the CPU (what the engine did before rft.engines.sharded_copy), against the
  engine's own per-tensor gather, without and with the reserve.

Run on a GPU host: python bench/pinned_host.py [--layers 28] [--takes 3] [--ways 'rft engine']
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WAYS = {
    "default": {},
    "host register, 8 threads": {
        "PYTORCH_CUDA_ALLOC_CONF": "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"
    },
    "reserved beforehand": {"RESERVE": "1"},
    "rft engine, nothing set aside": {"ENGINE": "1"},
    "rft engine, set aside at start": {"ENGINE": "1", "RESERVE": "1"},
    "fsdp2 engine, torch's full state dicts": {"ENGINE": "fsdp2", "TORCH_GATHER": "1"},
    "fsdp2 engine, gathered per tensor": {"ENGINE": "fsdp2"},
    "fsdp2 engine, gathered, set aside at start": {"ENGINE": "fsdp2", "RESERVE": "1"},
}


def shapes(layers: int) -> list[tuple[int, ...]]:
    """The parameters of a Qwen2.5-1.5B-shaped model with SmolLM2's vocabulary (tied head)."""
    hidden, mlp, kv, vocab = 1536, 8960, 256, 49152
    layer = [
        (hidden, hidden), (hidden,), (kv, hidden), (kv,), (kv, hidden), (kv,), (hidden, hidden),
        (mlp, hidden), (mlp, hidden), (hidden, mlp), (hidden,), (hidden,),
    ]  # fmt: skip
    return [(vocab, hidden), *(layer * layers), (hidden,)]


def engine_worker(takes: int) -> None:
    """A version's copies taken from rft's trainer engine, as TrainerCheckpointer.begin does."""
    import torch

    sys.path.insert(0, str(ROOT))
    from rft.engines.models import ModelSpec, load_model
    from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine

    spec = ModelSpec(name_or_path="qwen2.5-1.5b-shape", dtype="float32", device="cuda")
    model, tok = load_model(spec)
    config = TorchTrainerConfig(lr=1e-5)
    engine: Any
    if os.environ["ENGINE"] == "fsdp2":
        from rft.engines.fsdp_engine import build_fsdp2_engine
        from rft.engines.trainer import TrainerPlacement

        engine = build_fsdp2_engine(model, tok, config, TrainerPlacement(("cuda:0",)))
        params = [p for p in engine.worker.model.parameters() if p.requires_grad]
        optimizer = engine.worker.optimizer
    else:
        engine = TorchTrainerEngine(model, config, tokenizer=tok)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = engine.optimizer
    row: dict[str, float] = {"gb": sum(p.numel() * 4 for p in params) * 3.5 / 1e9}
    if os.environ.get("RESERVE"):
        started = time.perf_counter()
        thread = engine.reserve_version_copies(torch.bfloat16, with_master=True)
        if thread is not None:
            thread.join()
        row["reserve"] = time.perf_counter() - started
    for p in params:  # AdamW's moments exist after a step, as a trainer's do
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    take = torch_full_state_dicts if os.environ.get("TORCH_GATHER") else version_copies
    for k in range(takes):
        started = time.perf_counter()
        copies = take(engine)
        row[f"take{k + 1}"] = time.perf_counter() - started
        del copies
        engine.step += 1  # a new version: the fsdp2 engine gathers its weights once per step
    print(json.dumps(row), flush=True)
    close = getattr(engine, "close", None)
    if close is not None:
        close()


def version_copies(engine: Any) -> tuple[Any, ...]:
    """What TrainerCheckpointer takes for a version carrying the training state."""
    import torch

    return (
        engine.export_weights(torch.bfloat16, owned=True),
        engine.training_state(),
        engine.export_weights(owned=True),
    )


def torch_full_state_dicts(engine: Any) -> tuple[Any, ...]:
    """The same copies as the fsdp2 engine took them before its per-tensor gather."""
    import torch
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    worker = engine.worker
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = get_model_state_dict(worker.model, options=full)
    rounded = {k: v.to(torch.bfloat16) for k, v in weights.items() if isinstance(v, torch.Tensor)}
    return rounded, get_optimizer_state_dict(worker.model, worker.optimizer, options=full), weights


def worker(layers: int, takes: int) -> None:
    import torch

    if os.environ.get("ENGINE"):
        engine_worker(takes)
        return
    sys.path.insert(0, str(ROOT))
    from rft.engines.state_snapshot import cpu_snapshot

    params = [torch.randn(s, device="cuda") for s in shapes(layers)]
    state = {
        "master": params,
        "exp_avg": [torch.randn_like(p) for p in params],
        "exp_avg_sq": [torch.rand_like(p) for p in params],
    }
    torch.cuda.synchronize()
    row: dict[str, float] = {"gb": sum(p.numel() * 4 for p in params) * 3 / 1e9}
    if os.environ.get("RESERVE"):
        started = time.perf_counter()

        def reserve() -> None:
            # every block of the three copies alive at once, then freed: the allocator keeps
            # them for the takes (it reuses a freed block of the size asked for)
            held = [
                torch.empty(p.numel() * 4, dtype=torch.uint8, pin_memory=True)
                for copy in state.values()
                for p in copy
            ]
            del held

        thread = threading.Thread(target=reserve)
        thread.start()
        thread.join()
        row["reserve"] = time.perf_counter() - started
    for take in range(takes):
        started = time.perf_counter()
        copy = cpu_snapshot(state)
        row[f"take{take + 1}"] = time.perf_counter() - started
        del copy
    print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--takes", type=int, default=3)
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--ways", default="", help="only the ways whose names contain this")
    args = parser.parse_args()
    if args.worker:
        worker(args.layers, args.takes)
        return
    print("| way | state GB | reserved beforehand, s | take 1, s | later takes, s |")
    print("|---|---|---|---|---|")
    for name, env in WAYS.items():
        if args.ways not in name:
            continue
        done = subprocess.run(
            [sys.executable, __file__, "--worker", "--layers", str(args.layers)]
            + ["--takes", str(args.takes)],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            print(f"| {name} | failed: {done.stderr.strip().splitlines()[-1:]} | | | |")
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        later = " / ".join(f"{row[f'take{k}']:.2f}" for k in range(2, args.takes + 1))
        reserve = f"{row['reserve']:.2f}" if "reserve" in row else "–"
        print(f"| {name} | {row['gb']:.1f} | {reserve} | {row['take1']:.2f} | {later} |")


if __name__ == "__main__":
    main()
