"""The hf rollout engine on a tiny model: logprob convention, determinism, n, stops, weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rft.engines.logprobs import token_logprobs
from rft.engines.models import ModelSpec, load_model
from rft.engines.rollout import (
    ROLLOUT_ENGINES,
    HFRolloutEngine,
    RolloutEngineConfig,
    SamplingParams,
    cache_bucket,
    create_rollout_engine,
)
from rft.errors import ConfigError, EngineError
from rft.events.models import Task


@pytest.fixture(scope="module")
def engine() -> HFRolloutEngine:
    model, tok = load_model(ModelSpec("tiny", seed=5))
    return HFRolloutEngine(model, tok)


@pytest.fixture(scope="module")
def prompts(engine) -> list[list[int]]:
    return [
        engine.chat_prompt_ids([{"role": "user", "content": "What is 3 + 4?"}]),
        engine.chat_prompt_ids([{"role": "user", "content": "Hi"}]),  # shorter: left padded
    ]


def _recomputed(engine, rollout, temperature: float) -> np.ndarray:
    ids = np.concatenate([rollout.prompt_ids, rollout.response_ids]).astype(np.int64)
    with torch.inference_mode():
        lp, _ = token_logprobs(engine.model, torch.from_numpy(ids)[None], temperature=temperature)
    return lp[0, len(rollout.prompt_ids) - 1 :].numpy()


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_tokens=10, n=3, seed=1),
        SamplingParams(temperature=1.0, max_tokens=10, n=2, seed=2),
        SamplingParams(temperature=0.0, max_tokens=10),
    ],
    ids=["filtered", "plain", "greedy"],
)
def test_logprobs_match_recomputation(engine, prompts, params) -> None:
    out = engine.generate(prompts, params)
    assert [len(g) for g in out] == [params.n, params.n]
    for prompt, group in zip(prompts, out, strict=True):
        for r in group:
            assert r.prompt_ids.dtype == np.int32 and r.response_ids.dtype == np.int32
            assert r.logprobs.dtype == np.float32
            assert r.prompt_ids.tolist() == prompt
            assert len(r.logprobs) == len(r.response_ids) >= 1
            # the rollout says which temperature its logprobs are at; greedy ones are at 1.0
            assert r.logprob_temperature == params.logprob_temperature
            np.testing.assert_allclose(
                r.logprobs, _recomputed(engine, r, r.logprob_temperature), atol=1e-4
            )


def test_greedy_is_deterministic_and_matches_argmax(engine, prompts) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=8, n=2)
    a = engine.generate(prompts, params)
    b = engine.generate(prompts, params)
    assert [r.response_ids.tolist() for g in a for r in g] == [
        r.response_ids.tolist() for g in b for r in g
    ]
    assert a[0][0].response_ids.tolist() == a[0][1].response_ids.tolist()
    ids = torch.tensor([prompts[0]])
    with torch.inference_mode():
        first = int(engine.model(input_ids=ids).logits[0, -1].argmax())
    assert a[0][0].response_ids[0] == first


def test_seeded_sampling_is_reproducible(engine, prompts) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=12, n=4, seed=42)
    a = engine.generate(prompts, params)
    b = engine.generate(prompts, params)
    c = engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=12, n=4, seed=43))
    flat = [[r.response_ids.tolist() for r in g] for g in a]
    assert flat == [[r.response_ids.tolist() for r in g] for g in b]
    assert flat != [[r.response_ids.tolist() for r in g] for g in c]
    # n samples of one prompt differ from each other
    assert len({tuple(x) for x in flat[0]}) > 1


def test_seed_does_not_disturb_global_rng(engine, prompts) -> None:
    torch.manual_seed(9)
    expected = torch.rand(2)
    torch.manual_seed(9)
    engine.generate(prompts, SamplingParams(max_tokens=3, seed=1))
    assert torch.equal(torch.rand(2), expected)


def test_eos_ends_response_and_is_kept(engine, prompts) -> None:
    # Treat the greedy first token as a stop token: every response is that one token, "stop".
    first = engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=5))[0][0]
    stop_id = int(first.response_ids[0])
    out = engine.generate(
        prompts[:1], SamplingParams(temperature=0.0, max_tokens=5, stop_token_ids=(stop_id,))
    )[0][0]
    assert out.response_ids.tolist() == [stop_id]
    assert out.finish_reason == "stop"
    assert first.finish_reason == "length" and len(first.response_ids) == 5


def test_stop_strings_cut_after_the_completing_token(engine, prompts) -> None:
    free = engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=8))[0][0]
    stop = free.text[2:4]
    assert stop
    cut = engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=8, stop=(stop,)))[
        0
    ][0]
    assert cut.finish_reason == "stop"
    assert stop in cut.text and cut.text.endswith(stop)
    assert len(cut.response_ids) == len(cut.logprobs) < len(free.response_ids)


def test_max_batch_size_splits_without_changing_greedy_output(prompts) -> None:
    model, tok = load_model(ModelSpec("tiny", seed=5))
    whole = HFRolloutEngine(model, tok).generate(prompts, SamplingParams(0.0, max_tokens=6, n=2))
    split = HFRolloutEngine(model, tok, max_batch_size=1).generate(
        prompts, SamplingParams(0.0, max_tokens=6, n=2)
    )
    assert [r.response_ids.tolist() for g in whole for r in g] == [
        r.response_ids.tolist() for g in split for r in g
    ]


def test_load_state_dict_changes_outputs_and_version(prompts) -> None:
    model, tok = load_model(ModelSpec("tiny", seed=5))
    engine = HFRolloutEngine(model, tok)
    params = SamplingParams(temperature=0.0, max_tokens=6)
    before = engine.generate(prompts, params)
    other, _ = load_model(ModelSpec("tiny", seed=6))
    new_weights = HFRolloutEngine(other, tok).state_dict()
    assert "lm_head.weight" not in new_weights  # tied: exported once, as the embedding
    engine.load_state_dict(new_weights, version=3)
    assert engine.model_version == 3
    after = engine.generate(prompts, params)
    assert torch.equal(engine.model.lm_head.weight, other.lm_head.weight)
    assert [r.logprobs.tolist() for g in before for r in g] != [
        r.logprobs.tolist() for g in after for r in g
    ]


def test_load_state_dict_rejects_bad_weights(engine) -> None:
    good = engine.state_dict()
    with pytest.raises(EngineError, match="doesn't have"):
        engine.load_state_dict({**good, "bogus.weight": torch.zeros(1)}, version=1)
    partial = dict(good)
    partial.pop("model.norm.weight")
    with pytest.raises(EngineError, match="miss"):
        engine.load_state_dict(partial, version=1)
    bad = {**good, "model.norm.weight": torch.zeros(3)}
    with pytest.raises(EngineError, match="shape"):
        engine.load_state_dict(bad, version=1)
    assert engine.model_version == 0


def test_sampling_params_validation() -> None:
    for kwargs in ({"n": 0}, {"max_tokens": 0}, {"top_p": 0.0}, {"top_k": -1}):
        with pytest.raises(ConfigError):
            SamplingParams(**kwargs)


def test_registry_builds_hf_engine_and_names_unknown() -> None:
    assert "hf" in ROLLOUT_ENGINES
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    assert isinstance(engine, HFRolloutEngine)
    with pytest.raises(ConfigError, match="did you mean 'hf'"):
        create_rollout_engine("hff", RolloutEngineConfig())


def test_empty_prompt_is_rejected(engine) -> None:
    with pytest.raises(EngineError, match="prompt 1 is empty"):
        engine.generate([[1, 2], []], SamplingParams(max_tokens=2))


def _ranks_of_sampled_tokens(engine, out) -> list[int]:
    ranks = []
    for group in out:
        for r in group:
            ids = torch.from_numpy(np.concatenate([r.prompt_ids, r.response_ids]).astype(np.int64))
            with torch.inference_mode():
                logits = engine.model(input_ids=ids[None]).logits[0, len(r.prompt_ids) - 1 : -1]
            picked = logits.gather(-1, torch.from_numpy(r.response_ids).long()[:, None])
            ranks.extend((logits > picked).sum(-1).tolist())
    return ranks


def test_top_k_is_honoured_and_off_by_default(engine, prompts) -> None:
    # The tiny random model is near uniform over 259 tokens, so unfiltered samples mostly rank
    # far below the top 50 (a silent library default of top_k=50 would hide them).
    free = engine.generate(prompts, SamplingParams(max_tokens=10, n=4, seed=3))
    assert max(_ranks_of_sampled_tokens(engine, free)) >= 50
    top5 = engine.generate(prompts, SamplingParams(max_tokens=10, n=4, seed=3, top_k=5))
    assert max(_ranks_of_sampled_tokens(engine, top5)) < 5


@pytest.mark.slow
def test_smollm2_rollout_logprobs_match_recomputation() -> None:
    model, tok = load_model("smollm2")
    engine = HFRolloutEngine(model, tok)
    prompts = [
        engine.chat_prompt_ids([{"role": "user", "content": "What is 2 + 3?"}]),
        engine.chat_prompt_ids([{"role": "user", "content": "Name a color."}]),
    ]
    params = SamplingParams(temperature=0.8, max_tokens=16, n=2, seed=0)
    for group in engine.generate(prompts, params):
        for r in group:
            np.testing.assert_allclose(r.logprobs, _recomputed(engine, r, 0.8), atol=1e-3)


def _penalised_logprobs(engine, rollout, penalty: float) -> np.ndarray:
    """log_softmax of the logits after the repetition penalty, at each response position."""
    ids = np.concatenate([rollout.prompt_ids, rollout.response_ids]).astype(np.int64)
    with torch.inference_mode():
        logits = engine.model(input_ids=torch.from_numpy(ids)[None]).logits[0].double()
    out = []
    for j in range(len(rollout.response_ids)):
        pos = len(rollout.prompt_ids) - 1 + j
        row = logits[pos].clone()
        seen = torch.tensor(sorted(set(ids[: pos + 1].tolist())))
        row[seen] = torch.where(row[seen] > 0, row[seen] / penalty, row[seen] * penalty)
        out.append(float(torch.log_softmax(row, -1)[ids[pos + 1]]))
    return np.array(out)


def test_repetition_penalty_changes_sampling_but_not_the_reported_logprobs(engine, prompts) -> None:
    plain = engine.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12))
    penalised = engine.generate(
        prompts, SamplingParams(temperature=0.0, max_tokens=12, repetition_penalty=3.0)
    )
    assert [r.response_ids.tolist() for g in plain for r in g] != [
        r.response_ids.tolist() for g in penalised for r in g
    ]
    sampled = engine.generate(
        prompts, SamplingParams(temperature=0.8, max_tokens=12, n=2, seed=4, repetition_penalty=3.0)
    )
    for out, temperature in ((penalised, 1.0), (sampled, 0.8)):
        for r in (r for group in out for r in group):
            np.testing.assert_allclose(r.logprobs, _recomputed(engine, r, temperature), atol=1e-4)
    # the check above can tell: the penalised distribution is measurably another one
    r = penalised[0][0]
    assert np.abs(r.logprobs - _penalised_logprobs(engine, r, 3.0)).max() > 1e-2


def test_greedy_under_repetition_penalty_never_picks_below_the_penalised_argmax(
    engine, prompts
) -> None:
    (r,), _ = engine.generate(
        prompts, SamplingParams(temperature=0.0, max_tokens=10, repetition_penalty=2.0)
    )
    ids = np.concatenate([r.prompt_ids, r.response_ids]).astype(np.int64)
    with torch.inference_mode():
        logits = engine.model(input_ids=torch.from_numpy(ids)[None]).logits[0]
    for j, token in enumerate(r.response_ids.tolist()):
        pos = len(r.prompt_ids) - 1 + j
        row = logits[pos].clone()
        seen = torch.tensor(sorted(set(ids[: pos + 1].tolist())))
        row[seen] = torch.where(row[seen] > 0, row[seen] / 2.0, row[seen] * 2.0)
        assert token == int(row.argmax())


def test_min_tokens_keeps_eos_and_stop_tokens_away_until_then(engine, prompts) -> None:
    first = engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=8))[0][0]
    stop_id = int(first.response_ids[0])  # greedy's first token, made a stop token
    eos = engine.tokenizer.eos_token_id
    for min_tokens in (1, 3):
        params = SamplingParams(
            temperature=0.0, max_tokens=8, stop_token_ids=(stop_id,), min_tokens=min_tokens
        )
        r = engine.generate(prompts[:1], params)[0][0]
        assert len(r.response_ids) > min_tokens
        assert not {stop_id, eos} & set(r.response_ids[:min_tokens].tolist())
        np.testing.assert_allclose(r.logprobs, _recomputed(engine, r, 1.0), atol=1e-4)
        # the masked token was the likeliest: its mass is in the reported distribution
        assert r.logprobs[0] < first.logprobs[0]
    sampled = engine.generate(
        prompts, SamplingParams(max_tokens=6, n=8, seed=0, min_tokens=4, stop_token_ids=(stop_id,))
    )
    for group in sampled:
        for r in group:
            assert stop_id not in r.response_ids[:4].tolist()


def test_timeout_ends_every_row_with_finish_reason_timeout(engine, prompts) -> None:
    # the deadline passes during the first forward pass, so generation ends after one token
    out = engine.generate(prompts, SamplingParams(max_tokens=10, n=2, seed=0, timeout_s=1e-6))
    for group in out:
        for r in group:
            assert r.finish_reason == "timeout"
            assert 1 <= len(r.response_ids) < 10
            np.testing.assert_allclose(r.logprobs, _recomputed(engine, r, 1.0), atol=1e-4)
    free = engine.generate(prompts, SamplingParams(max_tokens=10, n=2, seed=0, timeout_s=600))
    assert {r.finish_reason for g in free for r in g} <= {"length", "stop"}


def test_chat_templates_per_engine_and_per_call(engine) -> None:
    model, tok = load_model(ModelSpec("tiny", seed=5))
    own = HFRolloutEngine(model, tok)
    chat = [{"role": "user", "content": "hi"}]
    default = own.tokenizer.decode(own.chat_prompt_ids(chat))
    assert default.endswith("<|im_start|>assistant\n")
    template = (
        "{% for m in messages %}[{{ m.role }}|{{ m.content }}]{% endfor %}"
        "{% if add_generation_prompt %}A{% if enable_thinking %}+think{% endif %}:{% endif %}"
    )
    own.set_chat_template(template, enable_thinking=True)
    assert own.tokenizer.decode(own.chat_prompt_ids(chat)) == "[user|hi]A+think:"
    own.set_chat_template(None, enable_thinking=None)  # keeps the template, drops the flag
    assert own.tokenizer.decode(own.chat_prompt_ids(chat)) == "[user|hi]A:"
    per_call = own.chat_prompt_ids(chat, chat_template="<{{ messages[0].content }}>")
    assert own.tokenizer.decode(per_call) == "<hi>"
    with pytest.raises(EngineError, match="cannot apply chat template"):
        own.chat_prompt_ids(chat, chat_template="{% for %}")


@pytest.fixture(scope="module")
def bucketed(engine) -> HFRolloutEngine:
    """The same weights on the compiled path's shapes: a static KV cache and padded buckets
    (transformers compiles the decode step only on a GPU; the shapes are the same on the CPU)."""
    return HFRolloutEngine(engine.model, engine.tokenizer, compiled=True)


def test_bucketed_static_cache_path_matches_the_eager_one(engine, bucketed, prompts) -> None:
    three = [*prompts, prompts[0][:-2]]  # 3 prompts -> a bucket of 8 rows, width 64
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    eager_out = engine.generate(three, greedy)
    static_out = bucketed.generate(three, greedy)
    assert len(static_out) == 3
    for a, b in zip(eager_out, static_out, strict=True):
        assert a[0].response_ids.tolist() == b[0].response_ids.tolist()
        np.testing.assert_allclose(a[0].logprobs, b[0].logprobs, atol=1e-4)
        # and the compiled path's logprobs follow the convention too
        np.testing.assert_allclose(b[0].logprobs, _recomputed(engine, b[0], 1.0), atol=1e-4)


def test_only_the_first_call_on_a_bucket_counts_as_compile_time(engine, prompts) -> None:
    fresh = HFRolloutEngine(engine.model, engine.tokenizer, compiled=True)
    params = SamplingParams(temperature=1.0, max_tokens=4, n=2, seed=3)
    fresh.generate(prompts, params)
    first = fresh.compile_seconds
    assert first > 0
    assert fresh.compiled_shapes == 1
    fresh.generate(prompts, SamplingParams(temperature=1.0, max_tokens=4, n=3, seed=4))  # 6 -> 8
    assert fresh.compile_seconds == first  # same bucket: (8 rows, cache 64)
    # another max_tokens whose prompt + reply still fit the same cache length: the same graph
    width = max(len(p) for p in prompts)
    assert cache_bucket(width + 5) == cache_bucket(width + 4)
    fresh.generate(prompts, SamplingParams(temperature=1.0, max_tokens=5, n=2, seed=5))
    assert fresh.compile_seconds == first
    fresh.generate(prompts, SamplingParams(temperature=1.0, max_tokens=70, seed=5))
    assert fresh.compile_seconds > first  # a longer cache: a new bucket
    assert fresh.compiled_shapes == 2
    assert engine.compile_seconds == 0.0  # the eager engine never compiles
    assert engine.compiled_shapes == 0
    assert engine.prefix_cache is None  # the HF engine keeps no KV cache between calls


def test_cache_buckets_are_few_and_pad_little() -> None:
    lengths = range(1, 8193)
    buckets = [cache_bucket(n) for n in lengths]
    assert all(b >= n for n, b in zip(lengths, buckets, strict=True))
    assert all(b - n < 64 for n, b in zip(lengths, buckets, strict=True) if n <= 512)
    assert all(b <= 1.25 * n for n, b in zip(lengths, buckets, strict=True) if n > 512)
    assert buckets == sorted(buckets)  # a longer conversation never needs a shorter cache
    # 8 up to 512, then 4 per doubling: 8 + 4 x 4 up to 8192, where multiples of 64 make 128
    assert len(set(buckets)) == 8 + 4 * 4


def test_a_multi_turn_conversation_on_the_compiled_path_matches_the_eager_one(engine) -> None:
    """A guess_number rollout played greedily turn by turn on the compiled path's shapes (static
    cache, prompts left-padded to growing cache buckets) is the eager engine's, token for token,
    and its growing prompts share a few buckets."""
    from rft.workflows import WORKFLOWS
    from rft.workflows.model_handle import DirectModelHandle

    shaped = HFRolloutEngine(engine.model, engine.tokenizer, compiled=True)
    task = Task(
        task_id="g",
        taskset="games",
        epoch=0,
        index=0,
        payload={"seed": 3},
        workflow="guess_number",
        format={"workflow_args": '{"max_turns": 4}'},
    )
    greedy = SamplingParams(temperature=0.0, max_tokens=24)
    workflow = WORKFLOWS.get("guess_number")()
    (eager,) = workflow.run(task, DirectModelHandle(engine), greedy, 0)
    fed: list[int] = []

    class Recording(DirectModelHandle):
        def generate(self, prompt_ids, params):  # type: ignore[no-untyped-def]
            fed.append(len(prompt_ids))
            return super().generate(prompt_ids, params)

    (compiled,) = workflow.run(task, Recording(shaped), greedy, 0)
    assert eager.metrics["turns"] == compiled.metrics["turns"] == len(fed) > 1
    assert compiled.token_ids.tolist() == eager.token_ids.tolist()
    np.testing.assert_allclose(compiled.logprobs, eager.logprobs, atol=1e-4)
    # each turn ran in the bucket of its conversation's length, and they grew past one bucket
    assert shaped._buckets == {(8, cache_bucket(n + 24)) for n in fed}
    assert len(shaped._buckets) > 1


def test_the_hf_engine_compiles_on_a_gpu_unless_eager() -> None:
    spec = ModelSpec("tiny")
    assert not create_rollout_engine("hf", RolloutEngineConfig(model=spec)).compiled  # CPU
    if torch.cuda.is_available():
        gpu = ModelSpec("tiny", device="cuda")
        assert create_rollout_engine("hf", RolloutEngineConfig(model=gpu)).compiled
        eager = RolloutEngineConfig(model=gpu, options={"enforce_eager": True})
        assert not create_rollout_engine("hf", eager).compiled
