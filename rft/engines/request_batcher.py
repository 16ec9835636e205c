"""`RequestBatcher`: one rollout engine shared by many workflow instances, their concurrent
requests gathered into batched `generate` calls; `BatchedModelHandle` is each instance's way in.

Each workflow instance (a thread) holds a handle from `RequestBatcher.handle()`; its `generate`
queues one request and blocks until the reply. A dispatcher thread, the only caller of the
engine (the HF engine is not re-entrant), gathers what is queued and flushes when every live
handle is waiting, when the queued rows (prompts x n) reach the engine's batch size, or when no
request has come for the gathering window (`window_s`), the case where some live instance is busy
elsewhere (a tool, an environment step). Each live handle has at most one request queued, so a
wave gathers for at most (live handles x window_s). A flush issues one
`engine.generate` per distinct sampling settings, each of at most `max_batch_size` rows. A
request's `timeout_s` is left out of that comparison (each request carries its own deadline), and
so is its `max_tokens` (replies clamped near a limit ask for their own): the call asks for the
largest, and each reply is cut to its own, as a call of its own would have ended it.

A handle stops counting as live when it is closed (a workflow that finished or raised), so the
others never wait on it. When a batched call fails, each of its requests is tried again alone,
so only the request that made the engine fail gets the error. vLLM schedules requests itself;
the same queue serves it, handing it many prompts per call.

`between_waves(work)` runs work (a weight load) on the dispatcher thread between two engine calls,
so a long-lived batcher (serve mode's) changes weights without a call in flight.

Rows of one batched call share the call's random stream: a sampled reply depends on the other
requests it was batched with, as a single-turn step's replies do today. Greedy replies do not.
A seeded call after the batcher's first gets the seed moved on by its call number, so each turn's
wave draws fresh random numbers rather than the first wave's again (the same run of waves
samples the same replies).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rft.engines.rollout import Rollout, RolloutEngine, SamplingParams, moved_seed
from rft.errors import EngineError

T = TypeVar("T")

# long enough for instances woken by one wave's replies to send their next turn's requests on
# a busy CPU, short beside a GPU wave's generation
DEFAULT_WINDOW_S = 0.02


class RequestDeadlineError(EngineError):
    """A handle's deadline passed (or the handle was closed) before a request could be made."""


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    deadline: float | None  # time.monotonic() value; None: no limit
    done: threading.Event = field(default_factory=threading.Event)
    replies: list[Rollout] | None = None
    error: BaseException | None = None

    @property
    def rows(self) -> int:
        return self.params.n

    def finish(self, replies: list[Rollout] | None, error: BaseException | None) -> None:
        self.replies, self.error = replies, error
        self.done.set()


@dataclass
class _Chore:
    """Work for the dispatcher thread between waves (`RequestBatcher.between_waves`)."""

    work: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller waiting on it
            self.error = exc
        self.done.set()


@dataclass
class BatcherStats:
    """What the batcher did: flushes (waves), engine calls, requests and rows served, failures."""

    waves: int = 0
    engine_calls: int = 0
    requests: int = 0
    rows: int = 0
    failed_requests: int = 0
    generated_tokens: int = 0


class RequestBatcher:
    """Gathers concurrent `generate` requests into batched engine calls (see module doc).

    Use as a context manager (or call `close`): the dispatcher thread starts on first use and
    serves what is queued before it stops.
    """

    def __init__(
        self,
        engine: RolloutEngine,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        max_batch_size: int | None = None,
    ) -> None:
        if window_s < 0:
            raise ValueError(f"gathering window must be >= 0 s, got {window_s}")
        cap = max_batch_size if max_batch_size is not None else engine.max_batch_size
        if cap is not None and cap < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {cap}")
        self._engine = engine
        self._window_s = window_s
        self._cap = cap
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._chores: list[_Chore] = []
        self._live = 0
        self._last_arrival = 0.0
        self._closed = False
        self._thread: threading.Thread | None = None
        self._template_lock = threading.Lock()
        self.stats = BatcherStats()

    @property
    def engine(self) -> RolloutEngine:
        return self._engine

    def handle(self, deadline: float | None = None) -> BatchedModelHandle:
        """A live handle for one workflow instance; close it when the instance ends.

        `deadline` (a time.monotonic() value): requests after it are refused, and one in flight
        gets at most the time left (its unfinished replies end with finish_reason "timeout").
        """
        with self._cond:
            if self._closed:
                raise EngineError("the request batcher is closed")
            self._live += 1
            self._start()
        return BatchedModelHandle(self, deadline)

    def between_waves(self, work: Callable[[], T]) -> T:
        """Run `work` on the dispatcher thread, between two engine calls (the engine is not
        re-entrant: loading weights while a batch generates would mix versions); its result,
        or its exception raised here."""
        chore = _Chore(work)
        with self._cond:
            if self._closed:
                raise EngineError("the request batcher is closed")
            self._chores.append(chore)
            self._start()
            self._cond.notify_all()
        chore.done.wait()
        if chore.error is not None:
            raise chore.error
        return chore.result  # type: ignore[no-any-return]

    def close(self) -> None:
        """Serve what is queued, then stop the dispatcher; later requests are refused."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def __enter__(self) -> RequestBatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def chat_prompt_ids(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool,
        chat_template: str | None,
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[int]:
        # one rendering at a time: a Rust tokenizer refuses concurrent use ("Already borrowed")
        with self._template_lock:
            return self._engine.chat_prompt_ids(
                messages, add_generation_prompt, chat_template, tools=tools
            )

    def encode(self, text: str) -> list[int]:
        """`text`'s token ids (no special tokens added), one tokenizer use at a time."""
        with self._template_lock:
            return [int(i) for i in self._engine.tokenizer.encode(text, add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """`ids` as text, one tokenizer use at a time."""
        with self._template_lock:
            return str(self._engine.tokenizer.decode(list(ids)))

    # ---- called by handles ----

    def _submit(self, request: _Request) -> list[Rollout]:
        if not request.prompt_ids:
            raise EngineError("prompt is empty")
        with self._cond:
            if self._closed:
                raise EngineError("the request batcher is closed")
            self._pending.append(request)
            self._last_arrival = time.monotonic()
            self._cond.notify_all()
        request.done.wait()
        if request.error is not None:
            raise request.error
        assert request.replies is not None
        return request.replies

    def _release(self) -> None:
        with self._cond:
            self._live -= 1
            self._cond.notify_all()

    # ---- the dispatcher ----

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._dispatch, name="rft-request-batcher", daemon=True
            )
            self._thread.start()

    def _ready(self) -> bool:
        if self._closed or len(self._pending) >= self._live:
            return True
        return self._cap is not None and sum(r.rows for r in self._pending) >= self._cap

    def _dispatch(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed and not self._chores:
                    self._cond.wait()
                if not self._chores:
                    if not self._pending:
                        return  # closed, nothing left to serve
                    # a chore handed in while a partial wave gathers goes first: a weight load
                    # must not wait out the window of a wave that is not ready
                    while not self._ready() and not self._chores:
                        left = self._last_arrival + self._window_s - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                chores, self._chores = self._chores, []
                if not chores:
                    batch, self._pending = self._pending, []
                    self.stats.waves += 1
            if chores:
                for chore in chores:
                    chore.run()
                continue
            self._serve(batch)

    def _serve(self, batch: list[_Request]) -> None:
        groups: dict[SamplingParams, list[_Request]] = {}
        for request in batch:
            # max_tokens is left out too: requests clamped near a limit share the call, each
            # reply cut to its own max_tokens after it (see `_own_length`)
            key = dataclasses.replace(request.params, timeout_s=None, max_tokens=1)
            groups.setdefault(key, []).append(request)
        for key, requests in groups.items():
            for call in _calls_of(requests, self._cap):
                try:
                    self._call(key, call)
                except BaseException as exc:  # noqa: BLE001 - each request learns what ended it
                    for request in call:
                        if not request.done.is_set():
                            request.finish(None, exc)

    def _call(self, key: SamplingParams, requests: list[_Request]) -> None:
        now = time.monotonic()
        expired = [r for r in requests if r.deadline is not None and r.deadline <= now]
        for request in expired:
            request.finish(None, RequestDeadlineError("the workflow's time ran out"))
            self.stats.failed_requests += 1
        requests = [r for r in requests if not r.done.is_set()]
        if not requests:
            return
        deadlines = [r.deadline for r in requests]
        params = dataclasses.replace(key, max_tokens=max(r.params.max_tokens for r in requests))
        if all(d is not None for d in deadlines):
            left = max(d for d in deadlines if d is not None) - now
            params = dataclasses.replace(key, timeout_s=left)
        try:
            outputs = self._generate([r.prompt_ids for r in requests], params)
        except Exception as exc:
            if len(requests) == 1:
                self.stats.failed_requests += 1
                requests[0].finish(None, exc)
                return
            for request in requests:  # alone, so only the request at fault gets the error
                self._call(key, [request])
            return
        for request, replies in zip(requests, outputs, strict=True):
            replies = [_own_length(r, request.params.max_tokens, self._engine) for r in replies]
            self.stats.requests += 1
            self.stats.rows += len(replies)
            self.stats.generated_tokens += sum(len(r.response_ids) for r in replies)
            request.finish(replies, None)

    def _generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Rollout]]:
        if params.seed is not None and self.stats.engine_calls:
            moved = moved_seed(params.seed, self.stats.engine_calls)
            params = dataclasses.replace(params, seed=moved)
        self.stats.engine_calls += 1
        outputs = self._engine.generate(prompts, params)
        if len(outputs) != len(prompts) or any(len(o) != params.n for o in outputs):
            raise EngineError(
                f"engine returned {[len(o) for o in outputs]} rollouts for {len(prompts)} "
                f"prompt(s) x n={params.n}"
            )
        return outputs


def _own_length(reply: Rollout, max_tokens: int, engine: RolloutEngine) -> Rollout:
    """`reply` as a call with `max_tokens` would have ended it: its first `max_tokens` tokens,
    finish "length", text decoded again (a reply's tokens do not depend on how many follow)."""
    if len(reply.response_ids) <= max_tokens:
        return reply
    ids = reply.response_ids[:max_tokens]
    text = engine.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)
    return dataclasses.replace(
        reply,
        response_ids=ids,
        logprobs=reply.logprobs[:max_tokens],
        text=text,
        finish_reason="length",
    )


def _calls_of(requests: list[_Request], cap: int | None) -> list[list[_Request]]:
    """`requests` in calls of at most `cap` rows (a request larger than `cap` goes alone)."""
    if cap is None:
        return [requests]
    calls: list[list[_Request]] = []
    rows = 0
    for request in requests:
        if calls and rows + request.rows <= cap:
            calls[-1].append(request)
            rows += request.rows
        else:
            calls.append([request])
            rows = request.rows
    return calls


class BatchedModelHandle:
    """A `rft.engines.model_handle.ModelHandle` whose requests go through a `RequestBatcher`."""

    def __init__(self, batcher: RequestBatcher, deadline: float | None) -> None:
        self._batcher = batcher
        self._deadline = deadline
        self._closed = False
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> Any:
        return self._batcher.engine.tokenizer

    @property
    def model_version(self) -> int:
        return self._batcher.engine.model_version

    @property
    def closed(self) -> bool:
        return self._closed

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> list[Rollout]:
        """`params.n` replies to one prompt, from the batched call it joined."""
        if self._closed:
            raise RequestDeadlineError("this model handle is closed (its workflow has ended)")
        if self._deadline is not None and time.monotonic() >= self._deadline:
            raise RequestDeadlineError("the workflow's time ran out")
        request = _Request([int(i) for i in prompt_ids], params, self._deadline)
        return self._batcher._submit(request)

    def chat_ids(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        return self._batcher.chat_prompt_ids(messages, add_generation_prompt, chat_template, tools)

    def close(self) -> None:
        """The instance has ended: the batcher no longer waits for its requests."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._batcher._release()

    def __enter__(self) -> BatchedModelHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
