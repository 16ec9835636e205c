"""Multi-turn call batching: a step of T tasks x R rollouts x K turns, batched vs one call each.

Every (task, rollout) is one instance of a K-turn echo game (each turn's prompt is the whole
sequence so far plus a user "again"; every reply is exactly --tokens tokens: min_tokens =
max_tokens). "batched": all T x R instances run at once in threads over one RequestBatcher (what
`rft.workflows.multi_turn_runner` does in a step). "direct": the same instances one after another
through DirectModelHandle, one engine call per turn. Prints engine calls per step, call waves,
wall time and generated tokens/s, medians of --repeats runs, per model.
"direct" makes one call after another, so its tokens/s does not depend on the step's size:
--direct-tasks / --direct-rollouts run it on a smaller step where the whole one takes too long.
--tiny-options sizes the random "tiny" model (e.g. SmolLM2-135M's shape, for a GPU without the
SmolLM2 file); --eager keeps the HF engine from compiling (each new shape would compile).
Run: PYTHONPATH=. python bench/multi_turn_batching.py [--models tiny smollm2] [--tasks 32 ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch

from rft.engines.model_handle import ModelHandle
from rft.engines.models import ModelSpec
from rft.engines.request_batcher import RequestBatcher
from rft.engines.rollout import Rollout, RolloutEngine, SamplingParams, create_rollout_engine
from rft.engines.rollout import RolloutEngineConfig as EngineConfig
from rft.workflows.model_handle import DirectModelHandle


class CallCounter(RolloutEngine):
    """An engine that records each generate call made through it: (prompts, params).

    `max_batch_size` replaces the inner engine's (the batcher reads it)."""

    def __init__(self, inner: RolloutEngine, max_batch_size: int | None = None) -> None:
        self.inner = inner
        self.calls: list[tuple[int, SamplingParams]] = []
        self._max_batch_size = max_batch_size

    @property
    def tokenizer(self) -> Any:
        return self.inner.tokenizer

    @property
    def model_version(self) -> int:
        return self.inner.model_version

    @property
    def max_batch_size(self) -> int | None:
        return self._max_batch_size or self.inner.max_batch_size

    def generate(
        self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[list[Rollout]]:
        self.calls.append((len(prompt_ids), params))
        return self.inner.generate(prompt_ids, params)

    def load_state_dict(self, tensors: Any, version: int) -> None:
        self.inner.load_state_dict(tensors, version)

    def state_dict(self) -> Any:
        return self.inner.state_dict()


def echo_game(model: ModelHandle, opening: str, turns: int, params: SamplingParams) -> int:
    """Plays `turns` turns; returns the tokens the model generated."""
    again = model.chat_ids([{"role": "user", "content": "again"}])
    ids = model.chat_ids([{"role": "user", "content": opening}])
    produced = 0
    for _ in range(turns):
        (reply,) = model.generate(ids, params)
        produced += len(reply.response_ids)
        ids = ids + [int(i) for i in reply.response_ids] + again
    return produced


def openings(tasks: int, rollouts: int) -> list[str]:
    return [f"Task {t}: tell me about the number {t * 7 % 50}." for t in range(tasks)] * rollouts


def run_batched(
    engine: CallCounter, games: list[str], turns: int, params: SamplingParams
) -> tuple[int, int, int]:
    produced = [0] * len(games)
    with RequestBatcher(engine) as batcher:
        handles = [batcher.handle() for _ in games]

        def play(i: int) -> None:
            with handles[i]:
                produced[i] = echo_game(handles[i], games[i], turns, params)

        threads = [threading.Thread(target=play, args=(i,)) for i in range(len(games))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return len(engine.calls), batcher.stats.waves, sum(produced)


def run_direct(
    engine: CallCounter, games: list[str], turns: int, params: SamplingParams
) -> tuple[int, int, int]:
    handle = DirectModelHandle(engine)
    produced = sum(echo_game(handle, g, turns, params) for g in games)
    return len(engine.calls), len(engine.calls), produced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny"])
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--modes", nargs="+", default=["batched", "direct"])
    parser.add_argument("--direct-tasks", type=int, default=None)
    parser.add_argument("--direct-rollouts", type=int, default=None)
    parser.add_argument("--tiny-options", type=json.loads, default={})
    parser.add_argument("--eager", action="store_true")
    args = parser.parse_args()
    params = SamplingParams(temperature=1.0, max_tokens=args.tokens, min_tokens=args.tokens, seed=0)
    games = {
        "batched": openings(args.tasks, args.rollouts),
        "direct": openings(args.direct_tasks or args.tasks, args.direct_rollouts or args.rollouts),
    }
    print(
        f"step: {args.tasks} tasks x {args.rollouts} rollouts x {args.turns} turns, "
        f"{args.tokens} tokens a turn, device {args.device}, torch threads "
        f"{torch.get_num_threads() if args.threads is None else args.threads}, "
        f"median of {args.repeats}"
        + (
            f"; direct on {len(games['direct'])} instances"
            if games["direct"] != games["batched"]
            else ""
        )
    )
    print(
        f"{'model':<8} {'mode':<8} {'games':>5} {'calls/step':>10} {'waves':>6} {'wall s':>8} {'tokens':>7} {'tok/s':>8}"
    )
    for name in args.models:
        options = args.tiny_options if name == "tiny" else {}
        engine = create_rollout_engine(
            "hf",
            EngineConfig(
                model=ModelSpec(name, device=args.device, options=options),
                num_threads=args.threads,
                options={"enforce_eager": args.eager},
            ),
        )
        runners = {"batched": run_batched, "direct": run_direct}
        for mode in args.modes:
            runs = []
            for _ in range(args.repeats):
                counter = CallCounter(engine)
                started = time.perf_counter()
                calls, waves, produced = runners[mode](counter, games[mode], args.turns, params)
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                runs.append((time.perf_counter() - started, calls, waves, produced))
            wall = statistics.median(r[0] for r in runs)
            calls = int(statistics.median(r[1] for r in runs))
            waves = int(statistics.median(r[2] for r in runs))
            produced = int(statistics.median(r[3] for r in runs))
            print(
                f"{name:<8} {mode:<8} {len(games[mode]):>5} {calls:>10} {waves:>6} {wall:>8.2f} {produced:>7} "
                f"{produced / wall:>8.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
