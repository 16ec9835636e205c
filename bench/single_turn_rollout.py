"""Single-turn rollout speed of the CPU example, before and after: tokens/s of explorer steps.

What one explorer step of examples/arithmetic does to roll out, in a checkout's own code:
`rft.workflows.step_runner.run_step` over 8 arithmetic tasks x 8 rollouts (`repeat_times`),
SmolLM2-135M float32 on the CPU, T=1.0, top_p 1.0, max_tokens 16, `runner_per_model` 8, the
explorer's step seed (rollout_model.seed 42 x 1_000_003 + step), prompt limits 64 / 8192. Prompts
are built, generated and scored (math_reward) as the explorer does; tokens/s is generated tokens
over the step's wall time, the explorer's `rollout_tokens_per_s`. The same steps (tasks and seeds)
run in every checkout, so each generates the same tokens.

Each `--roots` checkout runs in a process of its own (`--root`: its directory goes first on
sys.path, and the process checks that `rft` was imported from it), one untimed step first (lazy
imports, allocator growth; one task), then `--steps` timed steps. Processes alternate between the
checkouts for `--rounds` rounds, so load from other work on a shared machine falls on both;
the load average is read before each process. Printed: per process the median tokens/s of its
steps, then per checkout the median over all its steps and the median of its process medians.

Run: python bench/single_turn_rollout.py --roots /work/wt-base . [--rounds 4] [--steps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TASKS = 8
REPEAT_TIMES = 8
MAX_TOKENS = 16
SEED = 42
FORMAT = {
    "prompt_key": "question",
    "response_key": "answer",
    "system_prompt": "Answer with only the final number.",
}


def rows(step: int) -> list[dict[str, Any]]:
    """The example's train problems (1-digit operands up to 19, "+"): 8 per step, seeded by it."""
    rng = random.Random(1000 + step)
    out = []
    for _ in range(TASKS):
        a, b = rng.randint(0, 19), rng.randint(0, 19)
        out.append({"question": f"What is {a} + {b}?", "answer": a + b})
    return out


def worker(root: Path, steps: int, threads: int) -> None:
    sys.path.insert(0, str(root))
    import rft

    imported = Path(rft.__file__).resolve()
    if root.resolve() not in imported.parents:
        raise SystemExit(f"rft imported from {imported}, not from {root}")
    import torch

    from rft.engines.models import ModelSpec
    from rft.engines.prompt_limits import PromptLimits
    from rft.engines.rollout import RolloutEngineConfig, SamplingParams, create_rollout_engine
    from rft.events.models import Task
    from rft.workflows.step_runner import StepLimits, run_step

    torch.set_num_threads(threads)
    engine = create_rollout_engine(
        "hf",
        RolloutEngineConfig(
            model=ModelSpec("smollm2", dtype="float32", device="cpu", seed=SEED),
            num_threads=threads,
        ),
    )
    limits = StepLimits(
        runner_per_model=TASKS,
        max_timeout=600,
        max_retry_times=1,
        prompts=PromptLimits(64, 8192, False),
    )
    for step in range(steps + 1):
        tasks = [
            Task(
                task_id=f"bench-{step}-{i}",
                taskset="arithmetic_train",
                epoch=0,
                index=step * TASKS + i,
                payload=row,
                format=dict(FORMAT),
                workflow="math_workflow",
                reward_fn="math_reward",
                rollout_args={"temperature": 1.0, "top_p": 1.0, "max_tokens": MAX_TOKENS},
                repeat_times=REPEAT_TIMES,
            )
            for i, row in enumerate(rows(step))
        ][: TASKS if step else 1]  # the warm-up step: one task
        params = SamplingParams(max_tokens=MAX_TOKENS, seed=SEED * 1_000_003 + step)
        started = time.perf_counter()
        outcome = run_step(tasks, engine, params, limits)
        took = time.perf_counter() - started
        if outcome.given_up:
            raise SystemExit(f"tasks given up: {outcome.given_up}")
        tokens = sum(_generated(result) for result in outcome.results)
        if step:  # step 0 is the untimed warm-up
            print(json.dumps({"step": step, "seconds": took, "tokens": tokens}), flush=True)


def _generated(result: Any) -> int:
    """Generated tokens of one task's result, in either checkout's shape (a result's rollouts
    before the Trajectory shape, its trajectories' response ids after)."""
    if hasattr(result, "trajectories"):
        return sum(len(t.response_ids) for t in result.trajectories)
    return sum(len(r.response_ids) for r in result.rollouts)


def driver(args: argparse.Namespace) -> None:
    roots = [Path(r).resolve() for r in args.roots]
    runs: dict[Path, list[dict[str, float]]] = {root: [] for root in roots}
    process_medians: dict[Path, list[float]] = {root: [] for root in roots}
    print(
        f"{TASKS} tasks x {REPEAT_TIMES} rollouts x up to {MAX_TOKENS} tokens a step, "
        f"{args.steps} timed steps a process, {args.rounds} rounds, torch threads {args.threads}"
    )
    print("| round | checkout | load avg (1 min) | steps | tokens a step | median tok/s |")
    print("|---|---|---|---|---|---|")
    for round_no in range(args.rounds):
        order = roots if round_no % 2 == 0 else roots[::-1]
        for root in order:
            load = os.getloadavg()[0]
            done = subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--root",
                    str(root),
                    "--steps",
                    str(args.steps),
                    "--threads",
                    str(args.threads),
                ],
                cwd=root,
                env={**os.environ, "PYTHONPATH": str(root)},
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise SystemExit(f"{root}: exit {done.returncode}\n{done.stderr[-3000:]}")
            steps = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            runs[root].extend(steps)
            rate = statistics.median(s["tokens"] / s["seconds"] for s in steps)
            process_medians[root].append(rate)
            tokens = "/".join(str(int(s["tokens"])) for s in steps)
            print(
                f"| {round_no + 1} | {args.labels.get(str(root), root.name)} | {load:.2f} | "
                f"{len(steps)} | {tokens} | {rate:.1f} |",
                flush=True,
            )
    print("\n| checkout | steps | median tok/s (all steps) | median of process medians |")
    print("|---|---|---|---|")
    overall = {}
    for root in roots:
        rates = [s["tokens"] / s["seconds"] for s in runs[root]]
        overall[root] = statistics.median(rates)
        print(
            f"| {args.labels.get(str(root), root.name)} | {len(rates)} | {overall[root]:.1f} | "
            f"{statistics.median(process_medians[root]):.1f} |"
        )
    if len(roots) == 2:
        before, after = overall[roots[0]], overall[roots[1]]
        print(f"\nafter / before (all-step medians): {after / before:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="worker: the checkout to import rft from")
    parser.add_argument("--roots", nargs="+", help="driver: checkouts, before first")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--label", action="append", default=[], help="ROOT=NAME, a checkout's name in the table"
    )
    args = parser.parse_args()
    if args.root:
        worker(Path(args.root), args.steps, args.threads)
        return
    if not args.roots:
        parser.error("give --roots (driver) or --root (worker)")
    args.labels = {
        str(Path(k).resolve()): v for k, v in (item.split("=", 1) for item in args.label)
    }
    driver(args)


if __name__ == "__main__":
    main()
