"""RequestBatcher over the real HF engine (tiny model): concurrent workflow instances' requests
become batched calls whose greedy replies equal direct calls', one call per turn however the
instances end; distinct settings and the engine's batch size split calls; errors and deadlines
reach only their own caller."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import pytest

from bench.multi_turn_batching import CallCounter as CountingEngine
from rft.engines.model_handle import ModelHandle
from rft.engines.models import ModelSpec
from rft.engines.request_batcher import (
    BatchedModelHandle,
    RequestBatcher,
    RequestDeadlineError,
)
from rft.engines.rollout import (
    ROLLOUT_ENGINES,
    Rollout,
    RolloutEngine,
    RolloutEngineConfig,
    moved_seed,
)
from rft.engines.rollout import SamplingParams as SP
from rft.errors import EngineError
from rft.workflows.model_handle import DirectModelHandle

GREEDY = SP(temperature=0.0, max_tokens=4)
# long enough that only "every live instance waits" flushes a wave in these tests: no timing
LONG_WINDOW = 30.0


@cache
def tiny_engine() -> RolloutEngine:
    return ROLLOUT_ENGINES.get("hf")(RolloutEngineConfig(model=ModelSpec("tiny")))


def echo_game(
    model: ModelHandle, text: str, turns: int, params: SP = GREEDY, fail_at: int | None = None
) -> list[Rollout]:
    """Up to `turns` model turns: each prompt is the whole sequence so far plus "again"."""
    env = model.chat_ids([{"role": "user", "content": "again"}], add_generation_prompt=True)
    ids = model.chat_ids([{"role": "user", "content": text}])
    replies = []
    for turn in range(turns):
        if turn == fail_at:
            raise ValueError(f"{text}: the environment broke at turn {turn}")
        (reply,) = model.generate(ids, params)
        replies.append(reply)
        ids = ids + [int(i) for i in reply.response_ids] + env
    return replies


def run_concurrently(
    batcher: RequestBatcher, jobs: list[Callable[[BatchedModelHandle], Any]]
) -> list[Any]:
    """Each job in a thread of its own with a live handle; its result or exception, in order."""
    handles = [batcher.handle() for _ in jobs]
    out: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            with handles[i]:
                out[i] = jobs[i](handles[i])
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a workflow instance is stuck"
    return out


def same_replies(a: list[Rollout], b: list[Rollout]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert list(x.prompt_ids) == list(y.prompt_ids)
        assert list(x.response_ids) == list(y.response_ids)
        assert x.finish_reason == y.finish_reason
        np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-4)


TEXTS = ["hello", "a much longer opening message here", "x", "count to ten", "what now?"]


def test_greedy_replies_equal_direct_calls_with_one_call_per_turn() -> None:
    engine = CountingEngine(tiny_engine())
    direct = [echo_game(DirectModelHandle(engine), text, 3) for text in TEXTS]
    assert len(engine.calls) == 3 * len(TEXTS)
    engine.calls.clear()
    with RequestBatcher(engine, window_s=LONG_WINDOW) as batcher:
        got = run_concurrently(batcher, [lambda h, t=text: echo_game(h, t, 3) for text in TEXTS])
    for batched, alone in zip(got, direct, strict=True):
        same_replies(batched, alone)
    assert [n for n, _ in engine.calls] == [len(TEXTS)] * 3
    assert batcher.stats.engine_calls == batcher.stats.waves == 3
    assert batcher.stats.requests == 3 * len(TEXTS)


def test_instances_ending_at_different_turns_or_raising_never_stall_the_others() -> None:
    engine = CountingEngine(tiny_engine())
    turns = [1, 4, 2, 4, 3]
    with RequestBatcher(engine, window_s=LONG_WINDOW) as batcher:
        got = run_concurrently(
            batcher,
            [lambda h, t=t, k=k: echo_game(h, t, k) for t, k in zip(TEXTS, turns, strict=True)]
            + [lambda h: echo_game(h, "doomed", 4, fail_at=2)],
        )
    assert [len(r) for r in got[:-1]] == turns
    assert isinstance(got[-1], ValueError) and "turn 2" in str(got[-1])
    # one call per turn: wave k holds the instances still playing at turn k
    assert [n for n, _ in engine.calls] == [6, 5, 3, 2]
    for batched, (text, k) in zip(got, zip(TEXTS, turns, strict=True), strict=False):
        same_replies(batched, echo_game(DirectModelHandle(tiny_engine()), text, k))


def mixed_jobs() -> list[Callable[[BatchedModelHandle], Any]]:
    """5 one-row requests at 4 tokens and 3 two-row ones (n=2) at 6 tokens."""
    longer = SP(temperature=0.0, max_tokens=6, n=2)
    return [lambda h, t=t: echo_game(h, t, 1) for t in TEXTS] + [
        lambda h, t=t: h.generate(h.chat_ids([{"role": "user", "content": t}]), longer)
        for t in TEXTS[:3]
    ]


def test_distinct_settings_make_distinct_calls() -> None:
    engine = CountingEngine(tiny_engine())
    with RequestBatcher(engine, window_s=LONG_WINDOW) as batcher:
        got = run_concurrently(batcher, mixed_jobs())
    assert batcher.stats.waves == 1
    assert sorted((n, p.n, p.max_tokens) for n, p in engine.calls) == [(3, 2, 6), (5, 1, 4)]
    assert [len(r) for r in got] == [1] * 5 + [2] * 3


def test_no_call_exceeds_the_engines_batch_size() -> None:
    engine = CountingEngine(tiny_engine(), max_batch_size=4)
    with RequestBatcher(engine, window_s=LONG_WINDOW) as batcher:
        got = run_concurrently(batcher, mixed_jobs())
    assert all(n * p.n <= 4 for n, p in engine.calls)
    rows = {4: 0, 6: 0}
    for n, p in engine.calls:
        rows[p.max_tokens] += n * p.n
    assert rows == {4: 5, 6: 6}
    assert [len(r) for r in got] == [1] * 5 + [2] * 3


def test_a_request_the_engine_fails_on_fails_alone() -> None:
    engine = CountingEngine(tiny_engine())
    vocab = len(tiny_engine().tokenizer)

    def poisoned(h: BatchedModelHandle) -> list[Rollout]:
        return h.generate([1, 2, vocab + 10_000], GREEDY)

    with RequestBatcher(engine, window_s=LONG_WINDOW) as batcher:
        got = run_concurrently(
            batcher, [lambda h, t=t: echo_game(h, t, 2) for t in TEXTS[:3]] + [poisoned]
        )
    assert not isinstance(got[3], list), "an out-of-vocabulary prompt must fail"
    for batched, text in zip(got[:3], TEXTS, strict=False):
        same_replies(batched, echo_game(DirectModelHandle(tiny_engine()), text, 2))
    assert batcher.stats.failed_requests == 1


def test_empty_prompt_closed_handle_and_past_deadline_are_refused() -> None:
    with RequestBatcher(tiny_engine(), window_s=LONG_WINDOW) as batcher:
        with batcher.handle() as handle, pytest.raises(EngineError, match="empty"):
            handle.generate([], GREEDY)
        with pytest.raises(RequestDeadlineError, match="closed"):
            handle.generate([1, 2], GREEDY)
        late = batcher.handle(deadline=time.monotonic() - 1.0)
        with pytest.raises(RequestDeadlineError, match="time ran out"):
            late.generate([1, 2], GREEDY)
        late.close()
    with pytest.raises(EngineError, match="closed"):
        batcher.handle()


def test_each_seeded_wave_draws_afresh_and_a_rerun_repeats_them() -> None:
    sampled = SP(temperature=3.0, max_tokens=6, min_tokens=6, seed=11)

    def two_waves() -> list[list[int]]:
        batcher = RequestBatcher(tiny_engine(), window_s=LONG_WINDOW)
        with batcher, batcher.handle() as handle:
            prompt = handle.chat_ids([{"role": "user", "content": "roll"}])
            return [list(handle.generate(prompt, sampled)[0].response_ids) for _ in range(2)]

    first, second = two_waves()
    assert first != second, "the second wave must not replay the first wave's random draws"
    assert two_waves() == [first, second]


def test_a_salted_seed_draws_differently_on_the_cpu() -> None:
    # a salt added above the low 32 bits (seed + (salt << 32)) left torch's CPU draws unchanged,
    # so a step's chunks and a task's retries sampled the same random numbers
    from rft.workflows.runner import salted

    engine = tiny_engine()
    prompt = engine.chat_prompt_ids([{"role": "user", "content": "roll"}])
    base = SP(temperature=3.0, max_tokens=6, min_tokens=6, seed=11)
    draws = [
        list(engine.generate([prompt], salted(base, salt))[0][0].response_ids) for salt in range(3)
    ]
    assert draws[0] != draws[1] != draws[2] != draws[0]
    assert moved_seed(11, 0) == 11 and salted(base, 0) == base


def test_work_between_waves_runs_on_the_dispatcher_never_inside_an_engine_call() -> None:
    """A weight load handed to `between_waves` while two instances wait on a wave runs after
    that wave's engine call, on the dispatcher thread; its result or its error comes back."""
    engine = CountingEngine(tiny_engine())
    seen: list[tuple[str, int]] = []
    with RequestBatcher(engine, window_s=LONG_WINDOW) as batcher:
        first, second = batcher.handle(), batcher.handle()
        results: list[Any] = []
        waiting = threading.Thread(target=lambda: results.append(first.generate([5, 6], GREEDY)))
        waiting.start()
        # the request is queued before the chore comes (private state read only to order the
        # two): a chore that waited out the partial wave's window would see the engine called
        deadline = time.monotonic() + 60
        while not batcher._pending and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # and the dispatcher has (most likely) begun gathering its wave
        # one of two live handles waits: the wave is not flushed, so the chore goes first
        ran = batcher.between_waves(
            lambda: seen.append((threading.current_thread().name, len(engine.calls))) or 7
        )
        assert ran == 7  # the chore's own return value comes back
        second.generate([5, 6], GREEDY)
        waiting.join(60)
        assert seen == [("rft-request-batcher", 0)] and len(engine.calls) == 1 and results
        assert batcher.between_waves(lambda: len(engine.calls)) == 1
        with pytest.raises(ZeroDivisionError):
            batcher.between_waves(lambda: 1 / 0)
        first.close()
        second.close()
    with pytest.raises(EngineError, match="closed"):
        batcher.between_waves(lambda: None)


def test_requests_differing_only_in_max_tokens_share_a_call_each_cut_to_its_own() -> None:
    """Replies clamped to a limit ask for fewer tokens than the others: they share the wave's one
    call, and each comes back as a call with its own max_tokens ends it (greedy: token for token
    the direct call's, cut replies marked "length")."""
    engine = CountingEngine(tiny_engine())
    asks = [SP(temperature=0.0, max_tokens=k) for k in (8, 3, 1, 8, 5)]

    def job(text: str, params: SP) -> Callable[[BatchedModelHandle], Any]:
        return lambda h: h.generate(h.chat_ids([{"role": "user", "content": text}]), params)

    with RequestBatcher(engine, window_s=LONG_WINDOW) as batcher:
        got = run_concurrently(batcher, [job(t, p) for t, p in zip(TEXTS, asks, strict=True)])
    assert [(n, p.max_tokens) for n, p in engine.calls] == [(5, 8)]
    for text, params, replies in zip(TEXTS, asks, got, strict=True):
        handle = DirectModelHandle(tiny_engine())
        alone = handle.generate(handle.chat_ids([{"role": "user", "content": text}]), params)
        same_replies(replies, alone)
        assert len(replies[0].response_ids) <= params.max_tokens
        assert replies[0].text == alone[0].text
