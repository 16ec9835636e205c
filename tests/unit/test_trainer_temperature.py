"""The trainer recomputes each sequence's logprobs at the temperature it was sampled at.

Rollout logprobs are log_softmax(logits / T) at the sampling temperature T. On the same weights
the trainer's recomputation must give the same numbers, so the PPO ratio exp(new - old) is 1 for
every token; recomputing at 1.0 instead (the old behaviour) would not. Everything runs in float64
on one tiny model, so the only differences left are the temperature's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rft.algorithms.objective import LossBatch
from rft.engines.logprobs import token_logprobs
from rft.engines.models import ModelSpec, load_model
from rft.engines.rollout import HFRolloutEngine, Rollout, SamplingParams
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine, TrainBatch
from rft.errors import EngineError

TEMPERATURES = (0.7, 1.3)


@pytest.fixture(scope="module")
def model_and_tokenizer():
    return load_model(ModelSpec("tiny", seed=7, dtype="float64"))


@pytest.fixture(scope="module")
def rollouts(model_and_tokenizer) -> dict[float, list[Rollout]]:
    """Responses sampled by the hf rollout engine at each temperature (float64 weights)."""
    model, tok = model_and_tokenizer
    engine = HFRolloutEngine(model, tok)
    prompts = [
        engine.chat_prompt_ids([{"role": "user", "content": "What is 3 + 4?"}]),
        engine.chat_prompt_ids([{"role": "user", "content": "Hi"}]),  # shorter: left padded
    ]
    out = {}
    for seed, t in enumerate(TEMPERATURES):
        params = SamplingParams(temperature=t, max_tokens=16, n=3, seed=seed)
        out[t] = [r for group in engine.generate(prompts, params) for r in group]
        assert all(r.logprob_temperature == t for r in out[t])
    return out


def behaviour_logprobs(model, rollout: Rollout, temperature: float) -> np.ndarray:
    """float64 log π_T(response token) of one unpadded sequence: the sampling policy's numbers."""
    ids = np.concatenate([rollout.prompt_ids, rollout.response_ids]).astype(np.int64)
    with torch.no_grad():
        lp, _ = token_logprobs(
            model,
            torch.from_numpy(ids)[None],
            temperature=temperature,
            start=len(rollout.prompt_ids) - 1,
        )
    return lp[0].numpy()


def batch_of(rollouts: list[Rollout], old: list[np.ndarray], temperatures) -> TrainBatch:
    return TrainBatch(
        prompt_ids=[r.prompt_ids for r in rollouts],
        response_ids=[r.response_ids for r in rollouts],
        old_logprobs=old,
        action_mask=[np.ones(len(r.response_ids), dtype=np.int8) for r in rollouts],
        temperatures=temperatures,
    )


def recomputed(engine: TorchTrainerEngine, batch: TrainBatch) -> dict[str, torch.Tensor]:
    """What the loss sees in a train step: logprob, entropy and the [B, R] tensors."""
    seen: dict[str, torch.Tensor] = {}

    def capture(logprob, entropy, b: LossBatch):
        seen.update(old_logprobs=b.old_logprob, action_mask=b.action_mask)
        if b.ref_logprob is not None:
            seen["ref_logprobs"] = b.ref_logprob
        seen["logprob"], seen["entropy"] = logprob.detach(), entropy.detach()
        return (logprob * b.action_mask).sum() * 0.0, {}

    engine.train_step(batch, capture)
    return seen


def max_ratio_error(seen: dict[str, torch.Tensor]) -> float:
    valid = seen["action_mask"].bool()  # every response token is trained: the real tokens
    ratio = torch.exp(seen["logprob"] - seen["old_logprobs"])[valid]
    return float((ratio - 1.0).abs().max())


@pytest.fixture
def engine(model_and_tokenizer) -> TorchTrainerEngine:
    model, tok = model_and_tokenizer
    # lr 0: the weights stay those that sampled, so every step is fully on-policy
    return TorchTrainerEngine(
        model, TorchTrainerConfig(lr=0.0, micro_batch_size=16, use_ref_model=True), tokenizer=tok
    )


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_on_policy_ratio_is_one_at_the_sampling_temperature(
    model_and_tokenizer, rollouts, engine, temperature: float
) -> None:
    model, _ = model_and_tokenizer
    sampled = rollouts[temperature]
    old = [behaviour_logprobs(model, r, temperature) for r in sampled]
    seen = recomputed(engine, batch_of(sampled, old, [temperature] * len(sampled)))
    assert seen["logprob"].dtype == torch.float64
    assert max_ratio_error(seen) < 1e-6
    # what the rollout engine shipped (float32, as on the wire) agrees to float32 resolution
    shipped = [r.logprobs for r in sampled]
    seen = recomputed(engine, batch_of(sampled, shipped, [temperature] * len(sampled)))
    assert max_ratio_error(seen) < 1e-5


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_recomputing_at_one_instead_would_fail(
    model_and_tokenizer, rollouts, engine, temperature: float
) -> None:
    """The old behaviour (every row at 1.0) misses the same check by orders of magnitude."""
    model, _ = model_and_tokenizer
    sampled = rollouts[temperature]
    old = [behaviour_logprobs(model, r, temperature) for r in sampled]
    for at_one in (None, [1.0] * len(sampled)):  # None: the batch says nothing, rows are at 1.0
        assert max_ratio_error(recomputed(engine, batch_of(sampled, old, at_one))) > 1e-2


def test_mixed_temperatures_in_one_micro_batch_match_rows_alone(
    model_and_tokenizer, rollouts, engine
) -> None:
    model, _ = model_and_tokenizer
    # interleave 0.7 and 1.3 rows so that neighbours differ
    rows = [r for pair in zip(rollouts[0.7], rollouts[1.3], strict=True) for r in pair]
    temps = [r.logprob_temperature for r in rows]
    old = [behaviour_logprobs(model, r, t) for r, t in zip(rows, temps, strict=True)]
    mixed = batch_of(rows, old, temps)
    together = recomputed(engine, mixed)
    assert max_ratio_error(together) < 1e-6
    ref_together = engine.reference_logprobs(mixed)["ref_logprobs"]
    for i, (row, t) in enumerate(zip(rows, temps, strict=True)):
        alone_batch = batch_of([row], [old[i]], [t])
        alone = recomputed(engine, alone_batch)
        n = len(row.response_ids)
        torch.testing.assert_close(
            together["logprob"][i, :n], alone["logprob"][0, :n], atol=1e-10, rtol=0
        )
        torch.testing.assert_close(
            together["entropy"][i, :n], alone["entropy"][0, :n], atol=1e-10, rtol=0
        )
        ref_alone = engine.reference_logprobs(alone_batch)["ref_logprobs"]
        torch.testing.assert_close(ref_together[i, :n], ref_alone[0, :n], atol=1e-6, rtol=0)
        # entropy is that of the row's own distribution: -Σ p log p of softmax(logits / T)
        ids = torch.from_numpy(np.concatenate([row.prompt_ids, row.response_ids]).astype(np.int64))
        with torch.no_grad():
            logits = model(input_ids=ids[None]).logits[0, len(row.prompt_ids) - 1 : -1]
        logp = torch.log_softmax(logits.double() / t, dim=-1)
        want = -(logp.exp() * logp).sum(-1)
        torch.testing.assert_close(together["entropy"][i, :n], want, atol=1e-10, rtol=0)


def test_reference_logprobs_use_each_rows_temperature(model_and_tokenizer, rollouts, engine):
    """Before any update the reference equals the policy, so KL(old ‖ ref) is 0 per token only if
    the reference is scored at the temperature the old logprobs were recorded at."""
    model, _ = model_and_tokenizer
    rows = rollouts[0.7] + rollouts[1.3]
    temps = [r.logprob_temperature for r in rows]
    old = [behaviour_logprobs(model, r, t) for r, t in zip(rows, temps, strict=True)]
    out = engine.reference_logprobs(batch_of(rows, old, temps))
    mask = out["action_mask"].bool()
    # ref_logprobs come back as float32 tensors
    assert float((out["ref_logprobs"] - out["old_logprobs"])[mask].abs().max()) < 1e-5
    at_one = engine.reference_logprobs(batch_of(rows, old, None))
    assert float((at_one["ref_logprobs"] - at_one["old_logprobs"])[mask].abs().max()) > 1e-2


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), "0.7"])
def test_unusable_row_temperatures_are_refused_naming_the_row(rollouts, engine, bad) -> None:
    rows = rollouts[0.7][:2]
    batch = batch_of(rows, [r.logprobs for r in rows], [0.7, bad])
    with pytest.raises(EngineError, match="row 1: temperature"):
        engine.train_step(batch, lambda lp, ent, t: (lp.sum() * 0.0, {}))
    short = batch_of(rows, [r.logprobs for r in rows], [0.7])
    with pytest.raises(EngineError, match="temperatures has 1 rows"):
        engine.train_step(short, lambda lp, ent, t: (lp.sum() * 0.0, {}))
