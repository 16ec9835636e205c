"""bench/multi_turn_engines.py's own logic on the tiny HF engine: the counting engine sees every
turn of every game through the real runner, prefix cache counts add up (or stay absent), and
each variant is compared with its peer of the same run only."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pytest

from bench.multi_turn_engines import (
    VARIANTS,
    CountingEngine,
    game_tasks,
    ratios,
    summed,
    table,
)
from rft.engines.models import ModelSpec
from rft.engines.rollout import PrefixCacheCounts, RolloutEngineConfig, SamplingParams
from rft.engines.rollout import create_rollout_engine as build
from rft.workflows.runner import WorkflowResult, prepare_task, roll_out


@pytest.fixture(scope="module")
def engine() -> Any:
    return build(
        "hf", RolloutEngineConfig(model=ModelSpec("tiny"), options={"enforce_eager": True})
    )


def test_the_counting_engine_sees_every_turn_of_every_game(engine: Any) -> None:
    args = argparse.Namespace(tasks=2, rollouts=3, turns=3, high=1000)
    counter = CountingEngine(engine)
    params = SamplingParams(temperature=1.0, max_tokens=4, min_tokens=4, seed=1)
    cache: dict[str, Any] = {}
    items = [prepare_task(t, counter, params, cache) for t in game_tasks(args, run=1)]
    outcomes = roll_out(items, counter)
    trajectories = [t for o in outcomes if isinstance(o, WorkflowResult) for t in o.trajectories]
    assert len(trajectories) == 2 * 3
    turns = sum(int(t.metrics["turns"]) for t in trajectories)
    assert sum(counter.rows) == turns  # one request per turn played
    # the tokens the engine generated are the model's tokens of the trajectories
    model_tokens = sum(int(np.count_nonzero(t.action_mask)) for t in trajectories)
    assert sum(counter.generated) == model_tokens == 4 * turns
    assert counter.prefix == [None] * len(counter.rows)  # the HF engine has no prefix cache
    assert summed(counter.prefix) is None


def test_summed_adds_the_calls_counts() -> None:
    calls: list[PrefixCacheCounts | None] = [PrefixCacheCounts(100, 0), PrefixCacheCounts(140, 96)]
    total = summed(calls)
    assert total is not None
    assert (total.prompt_tokens, total.cached_tokens) == (240, 96)
    assert summed([*calls, None]) is None
    assert summed([]) is None


def row(engine: str, run: int, tokens_per_s: float, wall_s: float) -> dict[str, Any]:
    return {
        "engine": engine,
        "compiled": False,
        "run": run,
        "start_s": 1.0,
        "wall_s": wall_s,
        "trajectories": 4,
        "turns": 12,
        "calls": 3,
        "generated": 48,
        "tokens_per_s": tokens_per_s,
        "compiled_shapes": 0,
        "dynamo_graphs": 0,
        "compile_s": 0.0,
        "hit_rate": None,
        "hit_rate_after_first_call": None,
    }


def test_each_variant_is_compared_with_its_peer_of_the_same_run() -> None:
    assert VARIANTS["vllm"].peer == "vllm-no-prefix"
    assert VARIANTS["hf-compiled"].peer == "hf"
    rows = [
        row("hf", 1, 100.0, 2.0),
        row("hf-compiled", 1, 300.0, 0.5),
        row("hf-compiled", 2, 400.0, 0.25),  # no eager run 2: no ratio for it
        row("vllm", 1, 90.0, 1.1),  # no vllm-no-prefix at all: none either
    ]
    assert ratios(rows) == ["hf-compiled / hf, run 1: tokens/s x3.00, wall x0.25"]
    printed = table(rows).splitlines()
    assert len(printed) == 1 + len(rows)
    assert printed[1].split()[:3] == ["hf", "no", "1"]
