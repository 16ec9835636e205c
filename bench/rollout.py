"""Rollout benchmark on the real model: load time, generation throughput, addition accuracy.

Prints tables. Throughput: prompts x max_tokens sampled at T=1.0 in one generate call.
Accuracy: "What is a + b?" (single- and two-digit) under several prompt styles, greedy and
sampled, scored by the last number in the reply.
On a GPU (--device cuda) the clocks are read after torch.cuda.synchronize(), untimed warm-up
calls run first, and each throughput size is timed --repeats times (median reported).
Run: python bench/rollout.py [--model smollm2] [--threads 2] [--device cuda --dtype bfloat16]
"""

from __future__ import annotations

import argparse
import random
import re
import resource
import statistics
import time

import torch

from rft.engines.models import ModelSpec, load_model
from rft.engines.rollout import HFRolloutEngine, SamplingParams

STYLES: dict[str, tuple[str | None, str]] = {
    "sys-final-number": ("Answer with only the final number.", "What is {a} + {b}?"),
    "plain": (None, "What is {a} + {b}?"),
    "user-only-number": (None, "What is {a} + {b}? Answer with only the number."),
}

_NUMBER = re.compile(r"-?\d+")


def last_number(text: str) -> int | None:
    found = _NUMBER.findall(text.replace(",", ""))
    return int(found[-1]) if found else None


def problems(count: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    half = count // 2
    single = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(half)]
    double = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(count - half)]
    return single + double


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sync(device: str) -> None:
    """Wait for queued GPU work, so a host clock read after it covers that work."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peak_gpu_mib(device: str) -> float:
    return torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else 0.0


def messages(style: str, a: int, b: int) -> list[dict[str, str]]:
    system, user = STYLES[style]
    out = [{"role": "system", "content": system}] if system else []
    return [*out, {"role": "user", "content": user.format(a=a, b=b)}]


def warm_up(engine: HFRolloutEngine, device: str, calls: int, max_tokens: int) -> None:
    """Untimed generate calls, so kernel loading and allocator growth stay out of the numbers."""
    prompts = [engine.chat_prompt_ids(messages("plain", a, b)) for a, b in problems(8, seed=2)]
    for _ in range(calls):
        engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=0))
    sync(device)


def bench_throughput(
    engine: HFRolloutEngine, sizes: list[int], max_tokens: int, device: str, repeats: int
) -> None:
    gpu = device.startswith("cuda")
    timing = "one generate call" + (f", median of {repeats}" if repeats > 1 else "")
    print(f"\n## generation throughput (T=1.0, max_tokens={max_tokens}, {timing})")
    extra = " peak GPU MiB |" if gpu else ""
    print("| prompts | seconds | generated tokens | tokens/s | peak RSS MiB |" + extra)
    print("|---|---|---|---|---|" + ("---|" if gpu else ""))
    pool = problems(max(sizes), seed=1)
    for size in sizes:
        prompts = [engine.chat_prompt_ids(messages("plain", a, b)) for a, b in pool[:size]]
        params = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=0)
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        times: list[float] = []
        counts: list[int] = []
        for _ in range(repeats):
            sync(device)
            start = time.perf_counter()
            out = engine.generate(prompts, params)
            sync(device)
            times.append(time.perf_counter() - start)
            counts.append(sum(len(r.response_ids) for g in out for r in g))
        took = statistics.median(times)
        tokens = counts[times.index(took)] if took in times else counts[-1]
        rate = statistics.median(c / t for c, t in zip(counts, times, strict=True))
        row = f"| {size} | {took:.1f} | {tokens} | {rate:.0f} | {peak_rss_mib():.0f} |"
        print(row + (f" {peak_gpu_mib(device):.0f} |" if gpu else ""))


def bench_accuracy(
    engine: HFRolloutEngine,
    styles: list[str],
    count: int,
    samples: int,
    max_tokens: int,
    batch: int,
    temperatures: list[float],
    skip_greedy: bool,
    device: str,
) -> None:
    print(
        f"\n## addition accuracy ({count} problems, half 1-digit, half 2-digit; max_tokens {max_tokens})"
    )
    print("| style | decoding | single-digit | two-digit | all | no number | seconds |")
    print("|---|---|---|---|---|---|---|")
    pool = problems(count, seed=0)
    decodings = [] if skip_greedy else [("greedy", SamplingParams(0.0, max_tokens=max_tokens))]
    decodings += [
        (
            f"T={t} x{samples}",
            SamplingParams(temperature=t, max_tokens=max_tokens, n=samples, seed=0),
        )
        for t in temperatures
    ]
    for style in styles:
        prompts = [engine.chat_prompt_ids(messages(style, a, b)) for a, b in pool]
        for label, params in decodings:
            sync(device)
            start = time.perf_counter()
            groups = []
            for lo in range(0, len(prompts), batch):
                groups.extend(engine.generate(prompts[lo : lo + batch], params))
            sync(device)
            took = time.perf_counter() - start
            right = {"single": 0, "double": 0}
            seen = {"single": 0, "double": 0}
            missing = 0
            for (a, b), group in zip(pool, groups, strict=True):
                kind = "single" if a < 10 and b < 10 else "double"
                for r in group:
                    got = last_number(r.text)
                    missing += got is None
                    right[kind] += got == a + b
                    seen[kind] += 1
            total = sum(seen.values())
            print(
                f"| {style} | {label} | {right['single'] / seen['single']:.0%} "
                f"| {right['double'] / seen['double']:.0%} "
                f"| {sum(right.values()) / total:.0%} | {missing / total:.0%} | {took:.0f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--warmup", type=int, default=None, help="untimed generate calls first (cuda: 1, cpu: 0)"
    )
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per throughput size")
    parser.add_argument("--sizes", default="32,64")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--problems", type=int, default=100)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--styles", default=",".join(STYLES), help="comma list of prompt styles")
    parser.add_argument("--accuracy-max-tokens", type=int, default=32)
    parser.add_argument(
        "--temperatures", default="1.0", help="comma list, one sampled run each; empty for none"
    )
    parser.add_argument("--skip-greedy", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-accuracy", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    gpu = args.device.startswith("cuda")
    warmup = args.warmup if args.warmup is not None else (1 if gpu else 0)

    start = time.perf_counter()
    model, tok = load_model(ModelSpec(args.model, dtype=args.dtype, device=args.device))
    sync(args.device)
    load_s = time.perf_counter() - start
    print(f"# rollout bench: model={args.model} threads={args.threads}", end="")
    print(f" device={args.device} dtype={args.dtype}" if gpu or args.dtype != "float32" else "")
    if gpu:
        print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("\n| step | value |\n|---|---|")
    print(f"| model load (s) | {load_s:.1f} |")
    print(f"| peak RSS after load (MiB) | {peak_rss_mib():.0f} |")
    engine = HFRolloutEngine(model, tok)
    if warmup:
        warm_up(engine, args.device, warmup, min(args.max_tokens, 16))
    if not args.skip_throughput:
        sizes = [int(s) for s in args.sizes.split(",")]
        bench_throughput(engine, sizes, args.max_tokens, args.device, max(args.repeats, 1))
    if not args.skip_accuracy:
        styles = args.styles.split(",")
        bench_accuracy(
            engine,
            styles,
            args.problems,
            args.samples,
            args.accuracy_max_tokens,
            args.batch,
            [float(t) for t in args.temperatures.split(",") if t.strip()],
            args.skip_greedy,
            args.device,
        )
    print(f"\npeak RSS (MiB): {peak_rss_mib():.0f}")
    if gpu:
        print(f"peak GPU memory since last reset (MiB): {peak_gpu_mib(args.device):.0f}")


if __name__ == "__main__":
    main()
