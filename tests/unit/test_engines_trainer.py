"""The torch trainer engine on a tiny model: learning, accumulation, schedule, export/import."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rft.algorithms.objective import LossBatch
from rft.engines.logprobs import token_logprobs
from rft.engines.models import ModelSpec, load_model
from rft.engines.trainer import (
    TRAINER_ENGINES,
    TorchTrainerConfig,
    TorchTrainerEngine,
    TrainBatch,
    TrainerPlacement,
    cosine_schedule,
)
from rft.errors import ConfigError, EngineError


def maximise_logprob(logprob, entropy, batch: LossBatch):
    """Token-mean of -advantage * logprob over action tokens."""
    mask = batch.action_mask
    loss = -(batch.advantages * logprob * mask).sum() / mask.sum()
    return loss, {"entropy": (entropy.detach() * mask).sum() / mask.sum()}


def _batch(rows: int, seed: int = 0) -> TrainBatch:
    rng = np.random.default_rng(seed)
    prompts, responses, masks = [], [], []
    for _ in range(rows):
        prompts.append(rng.integers(3, 250, rng.integers(3, 9)).tolist())
        r = int(rng.integers(2, 7))
        responses.append(rng.integers(3, 250, r).tolist())
        mask = np.ones(r, dtype=np.int32)
        mask[0] = 0  # a non-trained token inside the response
        masks.append(mask.tolist())
    return TrainBatch(
        prompt_ids=prompts,
        response_ids=responses,
        old_logprobs=[[0.0] * len(r) for r in responses],
        action_mask=masks,
        advantages=torch.tensor(rng.normal(size=rows), dtype=torch.float64),
    )


def _response_logprob(model, batch: TrainBatch, i: int) -> float:
    ids = torch.tensor([list(batch.prompt_ids[i]) + list(batch.response_ids[i])])
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, start=len(batch.prompt_ids[i]) - 1)
    return float((lp[0] * torch.tensor(batch.action_mask[i], dtype=lp.dtype)).sum())


def test_train_step_raises_logprob_of_target() -> None:
    model, tok = load_model(ModelSpec("tiny", seed=2))
    engine = TorchTrainerEngine(
        model, TorchTrainerConfig(lr=1e-2, micro_batch_size=2), tokenizer=tok
    )
    batch = _batch(4)
    batch.advantages = torch.ones(4)
    before = [_response_logprob(model, batch, i) for i in range(4)]
    metrics = {}
    for _ in range(3):
        metrics = engine.train_step(batch, maximise_logprob)
    after = [_response_logprob(model, batch, i) for i in range(4)]
    assert all(a > b + 0.1 for a, b in zip(after, before, strict=True))
    assert metrics["grad_norm"] > 0 and metrics["lr"] == pytest.approx(1e-2)
    assert {"loss", "entropy", "skipped", "sequences", "action_tokens"} <= set(metrics)
    assert engine.step == 3


@pytest.mark.parametrize("accumulation", ["token", "sequence"])
def test_two_micro_batches_equal_one_full_batch(accumulation: str) -> None:
    batch = _batch(6, seed=1)

    def seq_mean(logprob, entropy, b: LossBatch):
        mask = b.action_mask
        per_seq = (b.advantages * logprob * mask).sum(-1) / mask.sum(-1)
        return -per_seq.mean(), {}

    loss_fn = maximise_logprob if accumulation == "token" else seq_mean
    grads, losses = [], []
    for micro in (6, 3):
        model, _ = load_model(ModelSpec("tiny", seed=3, dtype="float64"))
        config = TorchTrainerConfig(
            lr=1e-3, micro_batch_size=micro, accumulation=accumulation, grad_clip=0.0
        )
        engine = TorchTrainerEngine(model, config)
        metrics = engine.train_step(batch, loss_fn)
        losses.append(metrics["loss"])
        grads.append(metrics["grad_norm"])
        grads.append(model.model.norm.weight.detach().clone())
    assert losses[0] == pytest.approx(losses[1], rel=1e-10)
    assert grads[0] == pytest.approx(grads[2], rel=1e-10)
    assert torch.allclose(grads[1], grads[3], atol=1e-12)


def test_response_tensors_are_aligned_with_old_logprobs() -> None:
    model, _ = load_model(ModelSpec("tiny", seed=4, dtype="float64"))
    engine = TorchTrainerEngine(model, TorchTrainerConfig(micro_batch_size=8, lr=0.0))
    batch = _batch(3, seed=2)
    batch.old_logprobs = [
        [_token_lp(model, batch, i, j) for j in range(len(batch.response_ids[i]))] for i in range(3)
    ]
    seen = {}

    def check(logprob, entropy, b: LossBatch):
        seen.update(old_logprobs=b.old_logprob, action_mask=b.action_mask)
        seen["logprob"] = logprob.detach()
        return (logprob * b.action_mask).sum() * 0.0, {}

    engine.train_step(batch, check)
    lengths = [len(r) for r in batch.response_ids]
    assert tuple(seen["logprob"].shape) == (3, max(lengths))
    # the real tokens of each row: its response, right padded to the longest
    valid = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]
    assert torch.allclose(seen["logprob"][valid], seen["old_logprobs"][valid], atol=1e-10)
    assert seen["old_logprobs"][~valid].abs().sum() == 0
    assert seen["action_mask"][0, 0] == 0 and seen["action_mask"][~valid].sum() == 0


def _token_lp(model, batch: TrainBatch, i: int, j: int) -> float:
    ids = torch.tensor([list(batch.prompt_ids[i]) + list(batch.response_ids[i])])
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, start=len(batch.prompt_ids[i]) - 1)
    return float(lp[0, j])


def test_ref_model_stays_at_initial_weights() -> None:
    model, _ = load_model(ModelSpec("tiny", seed=5, dtype="float64"))
    engine = TorchTrainerEngine(model, TorchTrainerConfig(lr=1e-2, use_ref_model=True))
    batch = _batch(2, seed=3)
    batch.advantages = torch.ones(2)
    kl = []

    def with_kl(logprob, entropy, b: LossBatch):
        loss, m = maximise_logprob(logprob, entropy, b)
        diff = (logprob - b.ref_logprob) * b.action_mask
        kl.append(float(diff.detach().abs().sum()))
        return loss, m

    engine.train_step(batch, with_kl)
    engine.train_step(batch, with_kl)
    assert kl[0] == pytest.approx(0.0, abs=1e-12)
    assert kl[1] > 1e-6
    assert not any(p.requires_grad for p in engine.ref_model.parameters())


def test_warmup_then_cosine_schedule() -> None:
    config = TorchTrainerConfig(
        lr=1.0, warmup_steps=2, total_steps=6, lr_schedule="cosine", min_lr_ratio=0.1
    )
    factors = [cosine_schedule(s, config) for s in range(8)]
    assert factors[:3] == pytest.approx([0.5, 1.0, 1.0])
    assert factors[4] == pytest.approx(0.1 + 0.9 * 0.5)
    assert factors[6] == pytest.approx(0.1) and factors[7] == pytest.approx(0.1)
    model, _ = load_model("tiny")
    engine = TorchTrainerEngine(model, config)
    lrs = [engine.train_step(_batch(2), maximise_logprob)["lr"] for _ in range(3)]
    assert lrs == pytest.approx([0.5, 1.0, 1.0])


def test_save_hf_round_trip_gives_identical_logits(tmp_path) -> None:
    model, tok = load_model(ModelSpec("tiny", seed=6))
    engine = TorchTrainerEngine(model, TorchTrainerConfig(lr=1e-2), tokenizer=tok)
    engine.train_step(_batch(2), maximise_logprob)  # make it differ from any fresh init
    engine.save_hf(tmp_path / "ckpt")
    loaded, loaded_tok = load_model(str(tmp_path / "ckpt"))
    ids = torch.tensor([[5, 9, 40, 77, 3, 120]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, loaded(input_ids=ids).logits)
    assert loaded_tok("a + b").input_ids == tok("a + b").input_ids
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    # resume: a fresh engine picks the weights up from the directory
    fresh, _ = load_model(ModelSpec("tiny", seed=99))
    TorchTrainerEngine(fresh, TorchTrainerConfig()).load_hf_weights(tmp_path / "ckpt")
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, fresh(input_ids=ids).logits)


def test_export_names_are_hf_names_without_tied_duplicate() -> None:
    model, _ = load_model("tiny")
    engine = TorchTrainerEngine(model, TorchTrainerConfig())
    exported = engine.state_dict_for_export()
    assert "model.embed_tokens.weight" in exported and "lm_head.weight" not in exported
    assert set(exported) | {"lm_head.weight"} == set(model.state_dict())
    assert all(t.device.type == "cpu" for t in exported.values())


def test_optimizer_state_round_trip() -> None:
    model, _ = load_model("tiny")
    engine = TorchTrainerEngine(model, TorchTrainerConfig(warmup_steps=4, lr=1.0))
    engine.train_step(_batch(2), maximise_logprob)
    other_model, _ = load_model("tiny")
    other = TorchTrainerEngine(other_model, TorchTrainerConfig(warmup_steps=4, lr=1.0))
    other.restore_training_state(engine.training_state(), "the first engine's state")
    assert other.step == 1
    assert other.scheduler.get_last_lr() == pytest.approx([0.5])


def test_bad_batches_and_configs_fail_clearly() -> None:
    model, _ = load_model("tiny")
    engine = TorchTrainerEngine(model, TorchTrainerConfig())
    batch = _batch(2)
    batch.old_logprobs[1] = [0.0]
    with pytest.raises(EngineError, match="row 1: old_logprobs"):
        engine.train_step(batch, maximise_logprob)
    short = _batch(2)
    short.advantages = torch.ones(1)
    with pytest.raises(EngineError, match="advantages has 1 rows"):
        engine.train_step(short, maximise_logprob)
    with pytest.raises(ConfigError, match="lr_schedule"):
        TorchTrainerConfig(lr_schedule="linear-ish")
    with pytest.raises(ConfigError, match="accumulation"):
        TorchTrainerConfig(accumulation="tokens")
    with pytest.raises(EngineError, match="scalar"):
        engine.train_step(_batch(2), lambda lp, ent, t: (lp.sum(-1), {}))


def test_non_finite_gradients_skip_the_update() -> None:
    model, _ = load_model("tiny")
    engine = TorchTrainerEngine(model, TorchTrainerConfig(lr=1.0))
    before = model.model.norm.weight.detach().clone()
    metrics = engine.train_step(_batch(2), lambda lp, ent, t: ((lp * float("nan")).sum(), {}))
    assert metrics["skipped"] == 1.0
    assert torch.equal(model.model.norm.weight, before)


def test_registry_builds_torch_engine() -> None:
    model, tok = load_model("tiny")
    engine = TRAINER_ENGINES.get("torch")(model, tok, TorchTrainerConfig(), TrainerPlacement())
    assert isinstance(engine, TorchTrainerEngine)
    with pytest.raises(ConfigError, match="trainer.world_size"):
        TRAINER_ENGINES.get("torch")(
            model, tok, TorchTrainerConfig(), TrainerPlacement(("cpu", "cpu"))
        )


def test_bf16_autocast_keeps_fp32_master_weights_that_take_tiny_updates() -> None:
    """A bf16 weight cannot move by lr=1e-6 (its spacing near 0.02 is ~1e-4); the fp32 master
    copy does, so bf16 compute with fp32 weights still learns at small learning rates."""
    config = TorchTrainerConfig(lr=1e-6, micro_batch_size=2, weight_decay=0.0)
    batch = _batch(4, seed=3)

    def trained(dtype: torch.dtype, autocast: str | None) -> tuple[dict, dict]:
        model, _ = load_model(ModelSpec("tiny", seed=5))
        model.to(dtype)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        engine = TorchTrainerEngine(
            model, TorchTrainerConfig(**{**config.__dict__, "autocast_dtype": autocast})
        )
        metrics = engine.train_step(batch, maximise_logprob)
        assert math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
        return before, model.state_dict()

    def moved_fraction(before: dict, after: dict) -> float:
        keys = [k for k in before if before[k].dim() == 2]  # the matrices: most of the weights
        moved = sum(int((before[k] != after[k]).sum()) for k in keys)
        return moved / sum(before[k].numel() for k in keys)

    before, after = trained(torch.float32, "bfloat16")
    assert all(v.dtype == torch.float32 for v in after.values())
    assert moved_fraction(before, after) > 0.9
    # in pure bf16 only weights within ~2.5e-4 of zero can move by 1e-6
    before, after = trained(torch.bfloat16, None)
    assert moved_fraction(before, after) < 0.05


def test_autocast_dtype_other_than_bf16_is_refused() -> None:
    with pytest.raises(ConfigError, match="autocast"):
        TorchTrainerConfig(autocast_dtype="float16")
