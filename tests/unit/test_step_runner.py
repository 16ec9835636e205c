"""`run_step`: chunks of runner_per_model tasks per engine call, per-task deadlines and retries,
prompt limits and chat templates, on the scripted engine of test_workflows and on the tiny model."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from rft.engines.models import ModelSpec, load_model
from rft.engines.prompt_limits import PromptLimits, PromptTooLongError
from rft.engines.rollout import HFRolloutEngine, Rollout, SamplingParams
from rft.errors import EngineError
from rft.rewards import REWARD_FUNCTIONS
from rft.workflows.deadline import WorkflowFailedError, WorkflowTimeoutError
from rft.workflows.runner import run_workflows
from rft.workflows.step_runner import StepLimits, run_step
from tests.unit.test_workflows import QA, CannedEngine, make_task

RELEASE = threading.Event()  # lets the hanging reward fn's abandoned threads end
CALLS: Counter[str] = Counter()


def scripted_reward(response_text: str, payload: dict[str, Any], **args: Any) -> tuple[float, dict]:
    """payload["mode"]: "ok" scores, "raise" always raises, "flaky" raises on its first
    `fail_times` calls, "hang" blocks until RELEASE is set."""
    mode = payload.get("mode", "ok")
    CALLS[payload["question"]] += 1
    if mode == "raise":
        raise ValueError("bad row")
    if mode == "flaky" and CALLS[payload["question"]] <= payload["fail_times"]:
        raise RuntimeError("transient")
    if mode == "hang":
        RELEASE.wait(60)
    return float(str(payload["answer"]) in response_text), {}


REWARD_FUNCTIONS.add("scripted_reward", scripted_reward, replace=True)


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    CALLS.clear()
    RELEASE.clear()
    yield
    RELEASE.set()


def task(tid: str, mode: str = "ok", **kwargs: Any) -> Any:
    payload = {"question": f"q-{tid}", "answer": 1, "mode": mode, **kwargs.pop("payload", {})}
    return make_task(tid, payload, reward_fn="scripted_reward", **kwargs)


class FailingEngine(CannedEngine):
    """Raises for any call whose prompts include `poison`; ends `slow` prompts' rollouts with
    finish_reason "timeout", as an engine does when the call's timeout_s runs out."""

    def __init__(self, poison: str = "\x00", slow: str = "\x00") -> None:
        super().__init__({"": ["1"]})
        self.poison, self.slow = poison, slow

    def generate(
        self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[list[Rollout]]:
        texts = [self.tokenizer.decode(list(p)) for p in prompt_ids]
        out = super().generate(prompt_ids, params)
        if any(self.poison in t for t in texts):
            raise EngineError("generation failed: device lost")
        for text, group in zip(texts, out, strict=True):
            if self.slow in text:
                for r in group:
                    r.finish_reason = "timeout"
        return out


def test_runner_per_model_bounds_the_tasks_of_one_engine_call() -> None:
    tasks = [task(f"t{i}", repeat_times=2) for i in range(10)]
    base = SamplingParams(max_tokens=8, seed=1234)
    for per_model, sizes in ((4, [4, 4, 2]), (10, [10]), (1, [1] * 10)):
        engine = CannedEngine({"": ["1"]})
        outcome = run_step(tasks, engine, base, StepLimits(runner_per_model=per_model))
        assert [len(prompts) for prompts, _ in engine.calls] == sizes
        assert all(params.n == 2 for _, params in engine.calls)
        seeds = [params.seed for _, params in engine.calls]
        assert seeds[0] == base.seed and len(set(seeds)) == len(seeds)
        assert [r.task.task_id for r in outcome.results] == [t.task_id for t in tasks]
        assert outcome.given_up == {}


def test_a_raising_reward_fn_is_retried_then_given_up_with_its_reason() -> None:
    tasks = [
        task("ok"),
        task("bad", "raise"),
        task("flaky", "flaky", payload={"fail_times": 1}),
    ]
    engine = CannedEngine({"": ["1"]})
    outcome = run_step(tasks, engine, SamplingParams(), StepLimits(max_retry_times=2))
    assert [r.task.task_id for r in outcome.results] == ["ok", "flaky"]
    assert set(outcome.given_up) == {"bad"}
    error = outcome.given_up["bad"]
    assert isinstance(error, WorkflowFailedError)
    assert "gave up after 3 attempt(s)" in str(error)
    assert "ValueError: bad row (at " in str(error) and "in scripted_reward)" in str(error)
    assert (outcome.retries, outcome.failed_tasks, outcome.timeouts) == (3, 1, 0)
    assert CALLS["q-bad"] == 3 and CALLS["q-flaky"] == 2
    no_retry = run_step([task("bad2", "raise")], engine, SamplingParams(), StepLimits())
    assert "gave up after 1 attempt(s)" in str(no_retry.given_up["bad2"])


def test_a_hanging_reward_fn_times_out_and_its_chunk_mates_are_scored() -> None:
    tasks = [task("ok"), task("stuck", "hang"), task("ok2")]
    limits = StepLimits(max_timeout=2.0, max_retry_times=1)
    outcome = run_step(tasks, CannedEngine({"": ["1"]}), SamplingParams(), limits)
    assert [r.task.task_id for r in outcome.results] == ["ok", "ok2"]
    error = outcome.given_up["stuck"]
    assert isinstance(error, WorkflowTimeoutError)
    assert "timed out after 2 s while its reward fn 'scripted_reward' scored it" in str(error)
    assert (outcome.timeouts, outcome.retries, outcome.failed_tasks) == (2, 1, 1)
    assert outcome.metrics()["abandoned_reward_calls"] >= 1
    RELEASE.set()


def test_a_failed_generation_is_retried_task_by_task() -> None:
    tasks = [task("a"), task("poison"), task("b"), task("c")]
    engine = FailingEngine(poison="q-poison")
    outcome = run_step(tasks, engine, SamplingParams(), StepLimits(max_retry_times=1))
    assert [len(p) for p, _ in engine.calls] == [4, 1, 1, 1, 1]  # the chunk, then one by one
    assert [r.task.task_id for r in outcome.results] == ["a", "b", "c"]
    assert "EngineError: generation failed: device lost" in str(outcome.given_up["poison"])
    assert outcome.retries == 4 and outcome.failed_tasks == 1


def test_generation_out_of_time_times_out_the_chunk_then_retries_alone() -> None:
    tasks = [task("a"), task("slow"), task("b")]
    engine = FailingEngine(slow="q-slow")
    limits = StepLimits(runner_per_model=2, max_timeout=30.0, max_retry_times=1)
    outcome = run_step(tasks, engine, SamplingParams(), limits)
    timeouts = [params.timeout_s for _, params in engine.calls]
    assert all(t is not None and 0 < t <= 30.0 for t in timeouts)
    # chunk [a, slow] shares the generation that ran out; b's chunk is fine; a succeeds alone
    assert [r.task.task_id for r in outcome.results] == ["a", "b"]
    assert "timed out after 30 s in generation" in str(outcome.given_up["slow"])
    assert (outcome.timeouts, outcome.retries) == (3, 2)


def test_the_tiny_model_stops_at_the_deadline() -> None:
    model, tok = load_model(ModelSpec("tiny", seed=1))
    engine = HFRolloutEngine(model, tok)
    tasks = [task(f"t{i}", repeat_times=2) for i in range(3)]
    # far less than one forward pass: every attempt runs out of time in generation
    limits = StepLimits(max_timeout=1e-4, max_retry_times=1)
    outcome = run_step(tasks, engine, SamplingParams(max_tokens=64, seed=0), limits)
    assert outcome.results == [] and set(outcome.given_up) == {"t0", "t1", "t2"}
    assert all(isinstance(e, WorkflowTimeoutError) for e in outcome.given_up.values())
    assert outcome.timeouts == 6
    fine = run_step(
        tasks, engine, SamplingParams(max_tokens=6, seed=0), StepLimits(max_timeout=600)
    )
    assert len(fine.results) == 3 and fine.timeouts == 0


def long_task(tid: str, words: int, **kwargs: Any) -> Any:
    """A task with no system prompt whose question is about 2 * words tokens."""
    payload = {"question": "x " * words + "end?", "answer": 1}
    return make_task(tid, payload, workflow="simple_workflow", **kwargs)


def test_long_prompts_are_truncated_from_the_start_keeping_the_generation_prompt() -> None:
    engine = CannedEngine({"": ["1"]})
    prefix = {**QA, "reply_prefix": "So:"}
    tasks = [
        long_task("short", 1, format=prefix),
        long_task("long", 80, format=prefix),
    ]
    limits = StepLimits(prompts=PromptLimits(max_prompt_tokens=60, max_model_len=200))
    outcome = run_step(tasks, engine, SamplingParams(max_tokens=16), limits)
    ((prompts, _),) = engine.calls
    short, long = (engine.tokenizer.decode(p) for p in prompts)
    assert len(prompts[1]) == 60 and len(prompts[0]) < 60
    assert long.endswith("end?<|im_end|>\n<|im_start|>assistant\nSo:")
    assert short.startswith("<|im_start|>user\nx end?")  # untouched
    assert outcome.truncated_prompts == 1 and outcome.refused_prompts == 0
    assert [r.task.task_id for r in outcome.results] == ["short", "long"]


def test_long_prompts_are_refused_when_truncation_is_off_or_impossible() -> None:
    engine = CannedEngine({"": ["1"]})
    off = StepLimits(prompts=PromptLimits(max_prompt_tokens=60, max_model_len=200, truncate=False))
    outcome = run_step([long_task("ok", 1), long_task("long", 80)], engine, SamplingParams(), off)
    assert [r.task.task_id for r in outcome.results] == ["ok"]
    assert len(engine.calls[0][0]) == 1  # the refused task never reached the engine
    error = outcome.given_up["long"]
    assert isinstance(error, PromptTooLongError)
    assert "over model.max_prompt_tokens (60)" in str(error) and "is false" in str(error)
    assert outcome.refused_prompts == 1 and outcome.truncated_prompts == 0
    # a reply prefix longer than the whole limit cannot survive truncation
    tight = StepLimits(prompts=PromptLimits(max_prompt_tokens=10, max_model_len=200))
    prefixed = long_task("p", 5, format={**QA, "reply_prefix": "A long forced reply start"})
    refused = run_step([prefixed], engine, SamplingParams(), tight)
    assert "cannot be truncated" in str(refused.given_up["p"])


def test_responses_are_clamped_to_max_model_len() -> None:
    engine = CannedEngine({"": ["1"]})
    limits = StepLimits(prompts=PromptLimits(max_prompt_tokens=100, max_model_len=110))
    tasks = [long_task("a", 1), long_task("b", 40)]
    outcome = run_step(tasks, engine, SamplingParams(max_tokens=32, min_tokens=30), limits)
    (short_len, short), (long_len, long) = sorted(
        (len(p), params) for prompts, params in engine.calls for p in prompts
    )
    assert short.max_tokens == 32 and short.min_tokens == 30  # it fits: untouched
    assert long_len + long.max_tokens == 110 and long.min_tokens <= long.max_tokens < 32
    assert outcome.clamped_responses == 1 and len(outcome.results) == 2


TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}#reply{% if enable_thinking %}/think{% endif %}#{% endif %}"
)


def test_chat_templates_from_the_engine_and_from_the_task_format() -> None:
    engine = CannedEngine({"": ["1"]})
    engine.set_chat_template(TEMPLATE, enable_thinking=True)
    own = make_task("own", {"question": "q1", "answer": 1}, workflow="simple_workflow")
    per_task = make_task(
        "fmt",
        {"question": "q2", "answer": 1},
        workflow="simple_workflow",
        format={**QA, "chat_template": "[{{ messages[-1].content }}]"},
    )
    run_step([own, per_task], engine, SamplingParams(), StepLimits())
    run_workflows([own, per_task], engine, SamplingParams())  # evaluation builds them the same
    for prompts, _ in engine.calls:
        texts = [engine.tokenizer.decode(p) for p in prompts]
        assert texts == ["<user>q1#reply/think#", "[q2]"]


def test_a_task_whose_prompt_cannot_be_built_is_given_up_without_retries() -> None:
    engine = CannedEngine({"": ["1"]})
    broken = task("broken", format={**QA, "chat_template": "{% if %}"})
    outcome = run_step(
        [task("ok"), broken], engine, SamplingParams(), StepLimits(max_retry_times=3)
    )
    assert [r.task.task_id for r in outcome.results] == ["ok"]
    assert [len(p) for p, _ in engine.calls] == [1]
    error = outcome.given_up["broken"]
    assert isinstance(error, WorkflowFailedError)
    assert "its prompt could not be built: EngineError: cannot apply chat template" in str(error)
    assert (outcome.failed_tasks, outcome.retries) == (1, 0)
