"""Micro-benchmark of EventCodec on Experiences of 256 / 1k / 4k response tokens.

Prints a table of encodes/s and decodes/s (best of several rounds, CPU time, so that other
processes on a shared machine disturb the figures less). Run: `python bench/codec.py`.
"""

from __future__ import annotations

import argparse
import time
import timeit

import numpy as np

from rft.events.codec import EventCodec
from rft.events.models import Experience


def sample_experience(response_tokens: int, seed: int = 0) -> Experience:
    rng = np.random.default_rng(seed)
    return Experience(
        experience_id="task-17/3",
        task_id="task-17",
        group_id="task-17",
        group_size=8,
        explorer_id="explorer-0",
        model_version=12,
        prompt_ids=rng.integers(0, 50_000, 128, dtype=np.int32),
        response_ids=rng.integers(0, 50_000, response_tokens, dtype=np.int32),
        logprobs=-rng.random(response_tokens, dtype=np.float32),
        action_mask=np.ones(response_tokens, dtype=bool),
        reward=1.0,
        prompt_text="What is 12 + 30?",
        response_text="The answer is 42.",
        info={"finish_reason": "stop"},
        metrics={"generate_s": 0.5},
        created_at=1_767_225_600_000,
    )


def rate(call: object, number: int, rounds: int) -> float:
    best = min(timeit.repeat(call, number=number, repeat=rounds, timer=time.process_time))  # type: ignore[arg-type]
    return number / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    codec = EventCodec.default()
    print(f"{'tokens':>7} {'bytes':>7} {'encode/s':>10} {'MB/s':>7} {'decode/s':>10} {'MB/s':>7}")
    for tokens in (256, 1024, 4096):
        event = sample_experience(tokens)
        data = codec.encode(event)
        assert codec.decode(data) == event
        enc = rate(lambda event=event: codec.encode(event), args.number, args.rounds)
        dec = rate(lambda data=data: codec.decode(data), args.number, args.rounds)
        size = len(data)
        print(
            f"{tokens:>7} {size:>7} {enc:>10,.0f} {enc * size / 1e6:>7,.0f} "
            f"{dec:>10,.0f} {dec * size / 1e6:>7,.0f}"
        )


if __name__ == "__main__":
    main()
