"""Multi-turn rollouts on each rollout engine: one guess_number step through the real runner.

The step is --tasks guess_number tasks x --rollouts rollouts of --turns turns (each reply exactly
--tokens tokens: min_tokens = max_tokens), run through `rft.workflows.runner.prepare_task` and
`roll_out` (the explorer's path: the multi-turn runner, one workflow instance per rollout, their
requests batched by the RequestBatcher) on an engine built by the ROLLOUT_ENGINES registry. Each
engine variant runs in a process of its own (a fresh GPU, vLLM's memory sized from it), the step
--runs times on fresh game seeds; run 1 includes the HF compiled path's compilations.

Variants: `hf` (transformers generate, eager), `hf-compiled` (static cache + torch.compile on a
GPU; on the CPU the engine stays eager and the table says so), `vllm` (prefix caching on) and
`vllm-no-prefix` (off). Per run: engine start, wall time, trajectories, turns played, engine
calls, generated tokens and tokens/s; compiled shapes, torch.dynamo graphs and compile seconds
added in the run; the prefix cache's hit rate (cached / prompt tokens) over all calls and over
the calls after the first (turns 2 on, where a conversation's own earlier turns are the prefix).
Then ratios of each variant against its peer measured in the same invocation.

Run: PYTHONPATH=. python bench/multi_turn_engines.py --engines hf hf-compiled [--device cuda]
     [--model tiny --tiny-options '{"hidden_size": 576, ...}'] [--tasks 8 --rollouts 8 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench.multi_turn_batching import CallCounter
from rft.engines.models import ModelSpec, torch_dtype
from rft.engines.rollout import (
    PrefixCacheCounts,
    Rollout,
    RolloutEngine,
    RolloutEngineConfig,
    SamplingParams,
    create_rollout_engine,
)
from rft.events.models import Task
from rft.workflows.runner import WorkflowResult, prepare_task, roll_out


@dataclass(frozen=True)
class Variant:
    """One engine to measure: its registry name and the options that make it this variant."""

    engine_type: str
    options: Mapping[str, Any]
    peer: str | None = None  # the variant this one's ratios are taken against


VARIANTS: dict[str, Variant] = {
    "hf": Variant("hf", {"enforce_eager": True}),
    "hf-compiled": Variant("hf", {"enforce_eager": False}, peer="hf"),
    "vllm-no-prefix": Variant("vllm", {"enable_prefix_caching": False}),
    "vllm": Variant("vllm", {"enable_prefix_caching": True}, peer="vllm-no-prefix"),
}

SYSTEM_PROMPT = "You are playing a guessing game. Reply with only your guess, one whole number."


class CountingEngine(CallCounter):
    """multi_turn_batching's CallCounter that also records, per call, its rows, the tokens it
    generated and the prefix cache counts it added."""

    def __init__(self, inner: RolloutEngine) -> None:
        super().__init__(inner)
        self.rows: list[int] = []
        self.generated: list[int] = []
        self.prefix: list[PrefixCacheCounts | None] = []

    def chat_prompt_ids(self, *args: Any, **kwargs: Any) -> list[int]:
        return self.inner.chat_prompt_ids(*args, **kwargs)  # the inner engine's template settings

    def generate(
        self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[list[Rollout]]:
        before = self.inner.prefix_cache
        out = super().generate(prompt_ids, params)
        after = self.inner.prefix_cache
        self.rows.append(len(prompt_ids) * params.n)
        self.generated.append(sum(len(r.response_ids) for group in out for r in group))
        self.prefix.append(None if before is None or after is None else after.since(before))
        return out


def summed(counts: Sequence[PrefixCacheCounts | None]) -> PrefixCacheCounts | None:
    """The calls' prefix cache counts added up; None where the engine has no prefix cache."""
    if not counts or any(c is None for c in counts):
        return None
    total = PrefixCacheCounts()
    for c in counts:
        assert c is not None
        total.add(c.prompt_tokens, c.cached_tokens)
    return total


def game_tasks(args: argparse.Namespace, run: int) -> list[Task]:
    workflow_args = {"high": args.high, "max_turns": args.turns, "max_total_tokens": 1 << 20}
    return [
        Task(
            task_id=f"game-{run}-{t}",
            taskset="guess_number",
            epoch=0,
            index=t,
            payload={"seed": run * 100_000 + t},
            workflow="guess_number",
            format={"system_prompt": SYSTEM_PROMPT, "workflow_args": json.dumps(workflow_args)},
            repeat_times=args.rollouts,
        )
        for t in range(args.tasks)
    ]


def dynamo_graphs() -> int:
    """Graphs torch.dynamo compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def measure(variant_name: str, args: argparse.Namespace) -> None:
    """The worker: build the variant's engine, run the step --runs times, print one ROW a run."""
    variant = VARIANTS[variant_name]
    options = dict(variant.options)
    if variant.engine_type == "vllm":
        options.update(
            enforce_eager=args.vllm_eager,
            gpu_memory_utilization=args.gpu_memory_utilization,
            temperature=1.0,
        )
    spec = ModelSpec(args.model, dtype=args.dtype, device=args.device, options=args.tiny_options)
    started = time.perf_counter()
    engine = create_rollout_engine(variant.engine_type, RolloutEngineConfig(spec, options=options))
    start_s = time.perf_counter() - started
    compiled = bool(getattr(engine, "compiled", False))
    base = SamplingParams(temperature=1.0, max_tokens=args.tokens, min_tokens=args.tokens, seed=0)
    for run in range(1, args.runs + 1):
        counter = CountingEngine(engine)
        cache: dict[str, Any] = {}
        items = [prepare_task(t, counter, base, cache) for t in game_tasks(args, run)]
        compile_before, shapes_before = engine.compile_seconds, engine.compiled_shapes
        graphs_before = dynamo_graphs()
        began = time.perf_counter()
        outcomes = roll_out(items, counter, timeout_s=args.step_timeout)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        wall = time.perf_counter() - began
        failed = [o for o in outcomes if isinstance(o, Exception)]
        if failed:
            raise SystemExit(f"{variant_name}: {len(failed)} task(s) failed, first: {failed[0]!r}")
        trajectories = [
            t for o in outcomes if isinstance(o, WorkflowResult) for t in o.trajectories
        ]
        prefix_all = summed(counter.prefix)
        prefix_later = summed(counter.prefix[1:])
        row = {
            "engine": variant_name,
            "engine_type": variant.engine_type,
            "compiled": compiled,
            "run": run,
            "start_s": start_s,
            "wall_s": wall,
            "trajectories": len(trajectories),
            "turns": int(sum(t.metrics.get("turns", 0) for t in trajectories)),
            "calls": len(counter.rows),
            "rows": sum(counter.rows),
            "generated": sum(counter.generated),
            "tokens_per_s": sum(counter.generated) / wall,
            "compiled_shapes": engine.compiled_shapes - shapes_before,
            "dynamo_graphs": dynamo_graphs() - graphs_before,
            "compile_s": engine.compile_seconds - compile_before,
            "prompt_tokens": None if prefix_all is None else prefix_all.prompt_tokens,
            "cached_tokens": None if prefix_all is None else prefix_all.cached_tokens,
            "hit_rate": None if prefix_all is None else prefix_all.hit_rate,
            "hit_rate_after_first_call": None if prefix_later is None else prefix_later.hit_rate,
        }
        print("ROW " + json.dumps(row), flush=True)


def random_weights_dir(source: str, dtype: str, into: Path) -> Path:
    """An HF directory with `source`'s config and tokenizer files and randomly initialised
    weights (seed 0), written once into `into`: a model of a real shape and vocabulary whose
    weights need not travel."""
    from transformers import AutoConfig, AutoModelForCausalLM

    into.mkdir(parents=True, exist_ok=True)
    if (into / "model.safetensors").is_file():
        return into
    for f in Path(source).iterdir():
        if f.is_file() and not f.name.endswith((".safetensors", ".bin", ".gguf")):
            shutil.copy(f, into / f.name)
    config = AutoConfig.from_pretrained(source)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype(dtype))
    model.save_pretrained(into)
    return into


def worker_command(variant: str, argv: Sequence[str]) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), *argv, "--worker", variant]


def run_worker(variant: str, argv: Sequence[str], timeout_s: float) -> list[dict[str, Any]]:
    """Run one variant's worker; pass its output through as it comes, keep its ROW lines. A
    worker that fails or outlives `timeout_s` is said so, with the rows it made."""
    proc = subprocess.Popen(worker_command(variant, argv), stdout=subprocess.PIPE, text=True)
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    got = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("ROW "):
            got.append(json.loads(line[4:]))
        else:
            sys.stdout.write(line)
    code = proc.wait()
    timer.cancel()
    if timer.finished.is_set() and code != 0:
        print(f"{variant}: stopped after {timeout_s:g} s", flush=True)
    elif code != 0:
        print(f"{variant}: FAILED, exit {code}", flush=True)
    return got


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    head = (
        f"{'engine':<15} {'compiled':>8} {'run':>3} {'start s':>7} {'wall s':>7} {'traj':>5} {'turns':>5} "
        f"{'calls':>5} {'tokens':>7} {'tok/s':>8} {'shapes':>6} {'graphs':>6} {'comp s':>6} "
        f"{'hit':>6} {'hit 2+':>6}"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['engine']:<15} {'yes' if r['compiled'] else 'no':>8} {r['run']:>3} {r['start_s']:>7.1f} {r['wall_s']:>7.2f} "
            f"{r['trajectories']:>5} {r['turns']:>5} {r['calls']:>5} {r['generated']:>7} "
            f"{r['tokens_per_s']:>8.1f} {r['compiled_shapes']:>6} {r['dynamo_graphs']:>6} "
            f"{r['compile_s']:>6.1f} {percent(r['hit_rate']):>6} "
            f"{percent(r['hit_rate_after_first_call']):>6}"
        )
    return "\n".join(lines)


def ratios(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each variant against its peer, run by run, where both were measured."""
    by = {(r["engine"], r["run"]): r for r in rows}
    out = []
    for (name, run), r in sorted(by.items()):
        peer = VARIANTS[name].peer
        if peer is None or (peer, run) not in by:
            continue
        p = by[(peer, run)]
        out.append(
            f"{name} / {peer}, run {run}: tokens/s x{r['tokens_per_s'] / p['tokens_per_s']:.2f}, "
            f"wall x{r['wall_s'] / p['wall_s']:.2f}"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["hf", "hf-compiled"], choices=VARIANTS)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--tiny-options", type=json.loads, default={})
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--high", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--step-timeout", type=float, default=600.0)
    parser.add_argument("--engine-timeout", type=float, default=900.0)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    parser.add_argument(
        "--vllm-eager",
        type=lambda s: s.lower() in ("1", "true", "yes"),
        default=True,
        help="vLLM's enforce_eager (true: no CUDA graph capture)",
    )
    parser.add_argument(
        "--random-weights-from",
        default=None,
        help="an HF model directory: measure a model of its config and tokenizer with random "
        "weights (written once by this process, then --model for every engine)",
    )
    parser.add_argument("--random-weights-into", default=None)
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        measure(args.worker, args)
        return
    argv = list(sys.argv[1:])
    if args.random_weights_from:
        into = Path(args.random_weights_into or tempfile.mkdtemp(prefix="rft-random-"))
        args.model = str(random_weights_dir(args.random_weights_from, args.dtype, into))
        argv += ["--model", args.model]
        print(f"random weights of {args.random_weights_from}'s config in {args.model}", flush=True)
    print(
        f"step: {args.tasks} guess_number tasks x {args.rollouts} rollouts, {args.turns} turns, "
        f"{args.tokens} tokens a reply; model {args.model} {args.dtype} on {args.device}"
        + (f" {json.dumps(args.tiny_options)}" if args.tiny_options else ""),
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    for name in args.engines:
        got = run_worker(name, argv, args.engine_timeout)
        for r in got:
            print("ROW " + json.dumps(r), flush=True)
        rows.extend(got)
    print(table(rows))
    for line in ratios(rows):
        print(line)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
