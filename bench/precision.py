"""Trainer precision benchmark: float32 vs pure bfloat16 vs bf16 compute with float32 master weights.

The same model, batches and optimizer run once per precision. Printed per precision: median step
time and its ratio to float32, peak GPU memory, the share of weights an update moved, and how far
the total weight change after --steps steps lies from the float32 run's:
    drift = ||Δw - Δw_fp32|| / ||Δw_fp32||   (Δw = weights after the steps - weights before).
RL fine-tuning uses small learning rates (~1e-6); pure bf16 weights lose most such updates.
`--model smollm2-arch` builds SmolLM2-135M's architecture with random weights (no file needed).
Run: python bench/precision.py [--device cuda] [--model smollm2-arch] [--lr 1e-6] [--steps 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from train_step import clipped_pg_loss, sync, synthetic_batch

from rft.engines.models import ModelSpec, load_model
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine

# SmolLM2-135M's published architecture (config.json of the instruct model)
SMOLLM2_ARCH = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)

PRECISIONS = {  # name -> (weight dtype, autocast dtype)
    "float32": (torch.float32, None),
    "bf16 pure": (torch.bfloat16, None),
    "bf16 + fp32 master": (torch.float32, "bfloat16"),
}


def build_model(name: str, seed: int) -> Any:
    if name == "smollm2-arch":
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(seed)
        return LlamaForCausalLM(LlamaConfig(**SMOLLM2_ARCH)).eval()
    model, _ = load_model(ModelSpec(name, seed=seed))
    return model


def flat(model: Any) -> torch.Tensor:
    return torch.cat([p.detach().float().flatten() for p in model.parameters()])


def run(args: argparse.Namespace, precision: str, base: Any) -> dict[str, Any]:
    weight_dtype, autocast = PRECISIONS[precision]
    model = build_model(args.model, args.seed)
    model.load_state_dict(base)
    model.to(device=args.device, dtype=weight_dtype)
    config = TorchTrainerConfig(
        lr=args.lr, micro_batch_size=args.micro_batch, weight_decay=0.0, autocast_dtype=autocast
    )
    engine = TorchTrainerEngine(model, config)
    vocab = model.config.vocab_size
    batches = [
        synthetic_batch(args.sequences, args.prompt_len, args.response_len, vocab, seed=s)
        for s in range(args.steps)
    ]
    before = flat(model)
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    times = []
    for batch in batches:
        sync(args.device)
        start = time.perf_counter()
        engine.train_step(batch, clipped_pg_loss)
        sync(args.device)
        times.append(time.perf_counter() - start)
    after = flat(model)
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device.startswith("cuda") else 0.0
    return {
        "delta": after - before,
        "moved": float((after != before).float().mean()),
        "step_s": statistics.median(times[1:] if len(times) > 1 else times),
        "peak_gib": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny, smollm2-arch, or a model source")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=30)
    parser.add_argument("--response-len", type=int, default=50)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    base = {k: v.clone() for k, v in build_model(args.model, args.seed).state_dict().items()}
    gpu = args.device.startswith("cuda")
    where = torch.cuda.get_device_name() if gpu else "cpu"
    print(
        f"# precision bench: model={args.model} device={args.device} ({where}) lr={args.lr} "
        f"steps={args.steps} batch={args.sequences}x({args.prompt_len}+{args.response_len}) "
        f"micro-batch={args.micro_batch}; step time = median of steps 2..n"
    )
    results = {name: run(args, name, base) for name in PRECISIONS}
    ref = results["float32"]
    ref_norm = float(ref["delta"].norm())
    print("\n| precision | step s | vs fp32 | peak GPU GiB | weights moved | drift vs fp32 |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        drift = float((r["delta"] - ref["delta"]).norm()) / ref_norm
        print(
            f"| {name} | {r['step_s']:.3f} | {r['step_s'] / ref['step_s']:.2f}x "
            f"| {r['peak_gib']:.2f} | {r['moved']:.1%} | {drift:.3f} |"
        )


if __name__ == "__main__":
    main()
