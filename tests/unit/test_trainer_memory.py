"""Memory settings of the trainer (`trainer.use_dynamic_bsz` / `max_token_len_per_gpu`,
`enable_gradient_checkpointing`, `optimizer_offload`, `param_offload`) change memory and step time,
never what a step computes:

- the same batch split two ways (by rows, by a token budget) gives the same loss and gradient
  within float tolerance (float64 here, so the tolerance is tight), and the budget does bound each
  micro-batch's padded size;
- gradient checkpointing and optimizer offload give the same weights after steps as without;
  checkpointed layers get the gradients of plain ones, their input needing one or not;
- on FSDP2 over gloo, param_offload and gradient checkpointing give the weights of a plain run;
- the keys load and act; param_offload on the torch engine is refused naming the key.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

from rft.algorithms.objective import build_loss
from rft.catalog import load_config
from rft.consumers.trainer.trainer import token_budget, trainer_engine_config
from rft.engines.activation_checkpointing import checkpoint_decoder_layers
from rft.engines.micro_batches import micro_batches
from rft.engines.models import ModelSpec, load_model
from rft.engines.trainer import (
    TRAINER_ENGINES,
    TorchTrainerConfig,
    TorchTrainerEngine,
    TrainerPlacement,
    split_micro_batches,
)
from rft.engines.weights import export_state_dict
from rft.errors import ConfigError
from tests.unit.config_samples import MINIMAL
from tests.unit.test_engines_trainer import _batch, maximise_logprob
from tests.unit.test_fsdp_engine import GrpoObjective, batch, dpo_batch, max_diff

pytestmark = pytest.mark.timeout(420)


def _grads(config: TorchTrainerConfig, rows: int = 9) -> tuple[float, dict[str, torch.Tensor]]:
    """Loss and gradient of one step's batch (float64 tiny model), nothing updated."""
    model, tok = load_model(ModelSpec("tiny", seed=4, dtype="float64"))
    engine = TorchTrainerEngine(model, config, tokenizer=tok)
    b = _batch(rows, seed=11)
    engine.optimizer.zero_grad(set_to_none=True)
    groups = engine._micro_batches(b)
    counts = [sum(sum(b.action_mask[i]) for i in g) for g in groups]
    loss, _ = engine._accumulate(b, maximise_logprob, [c / sum(counts) for c in counts])
    return loss, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_the_same_batch_split_two_ways_gives_the_same_gradient() -> None:
    rows = TorchTrainerConfig(micro_batch_size=1)
    tokens = TorchTrainerConfig(micro_batch_size=1, max_tokens_per_micro_batch=40)
    b = _batch(9, seed=11)
    by_rows, by_tokens = split_micro_batches(b, rows), split_micro_batches(b, tokens)
    assert len(by_rows) == 9 and 1 < len(by_tokens) < 9  # really another split
    for group in by_tokens:
        width = max(len(b.prompt_ids[i]) for i in group) + max(
            len(b.response_ids[i]) for i in group
        )
        assert len(group) == 1 or len(group) * width <= 40
    loss_rows, grads_rows = _grads(rows)
    loss_tokens, grads_tokens = _grads(tokens)
    assert loss_rows == pytest.approx(loss_tokens, rel=1e-12)
    assert set(grads_rows) == set(grads_tokens)
    assert max(float(g.abs().max()) for g in grads_rows.values()) > 0
    for name, g in grads_rows.items():
        torch.testing.assert_close(grads_tokens[name], g, rtol=1e-10, atol=1e-12)


def test_token_budget_splits_keep_order_and_put_a_long_row_alone() -> None:
    # padded cost = rows x (longest prompt + longest response)
    groups = micro_batches([4, 4, 4, 30, 2], [4, 4, 4, 30, 2], 8, max_tokens=24)
    assert groups == [[0, 1, 2], [3], [4]]
    assert micro_batches([4] * 5, [4] * 5, 2) == [[0, 1], [2, 3], [4]]


def test_a_token_budget_cuts_only_between_pairs_and_dpo_trains_the_same() -> None:
    """With units of two rows (a loss over pairs) the budget that would cut rows 2 and 3
    apart cuts before row 2; DPO on the torch engine then trains the same weights split by
    rows as by a token budget (float64)."""
    lengths = [4, 4, 4, 4, 4, 4]
    assert micro_batches(lengths, lengths, 2, max_tokens=24) == [[0, 1, 2], [3, 4, 5]]
    assert micro_batches(lengths, lengths, 2, max_tokens=24, unit=2) == [[0, 1], [2, 3], [4, 5]]
    dpo = build_loss("dpo")

    def trained(config: TorchTrainerConfig) -> tuple[dict[str, torch.Tensor], int]:
        model, tok = load_model(ModelSpec("tiny", seed=4, dtype="float64"))
        engine = TorchTrainerEngine(model, config, tokenizer=tok)
        for step in range(2):
            assert engine.train_step(dpo_batch(step), dpo)["skipped"] == 0.0
        return dict(engine.state_dict_for_export()), len(engine._micro_batches(dpo_batch(0), 2))

    base = TorchTrainerConfig(lr=1e-2, micro_batch_size=6, use_ref_model=True)
    by_rows, one = trained(base)
    by_tokens, several = trained(dataclasses.replace(base, max_tokens_per_micro_batch=40))
    assert one == 1 and several > 1  # really another split
    assert max_diff(by_rows, by_tokens) <= 1e-10


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "seq-mean-token-sum", "token-mean"])
def test_a_batch_split_into_micro_batches_trains_the_whole_batchs_loss(mode: str) -> None:
    """GRPO's loss averaged by `mode`: one micro-batch of 9 rows and micro-batches of 2 give the
    same weights (float64). A seq-mean mode averages rows, so each micro-batch must weigh its
    share of the rows, not of the tokens the engine counts."""
    loss = build_loss("grpo", {"loss_agg_mode": mode})

    def trained(micro: int) -> dict[str, torch.Tensor]:
        model, tok = load_model(ModelSpec("tiny", seed=4, dtype="float64"))
        config = TorchTrainerConfig(lr=1e-2, micro_batch_size=micro, use_ref_model=True)
        engine = TorchTrainerEngine(model, config, tokenizer=tok)
        for step in range(2):
            assert engine.train_step(_batch(9, seed=20 + step), loss)["skipped"] == 0.0
        return dict(engine.state_dict_for_export())

    assert max_diff(trained(9), trained(2)) <= 1e-10


def _trained(config: TorchTrainerConfig) -> dict[str, torch.Tensor]:
    model, tok = load_model(ModelSpec("tiny", seed=4))
    engine = TorchTrainerEngine(model, config, tokenizer=tok)
    for step in range(2):
        assert engine.train_step(_batch(6, seed=step), maximise_logprob)["skipped"] == 0.0
    return dict(engine.state_dict_for_export())


def test_gradient_checkpointing_and_optimizer_offload_train_the_same_weights() -> None:
    base = TorchTrainerConfig(lr=1e-2, micro_batch_size=3)
    plain = _trained(base)
    moved = max_diff(plain, export_state_dict(load_model(ModelSpec("tiny", seed=4))[0]))
    assert moved > 1e-3
    checkpointed = _trained(dataclasses.replace(base, gradient_checkpointing=True))
    assert max_diff(plain, checkpointed) <= 1e-6
    offloaded = _trained(dataclasses.replace(base, optimizer_offload=True))
    assert max_diff(plain, offloaded) == 0.0


def test_checkpointing_recomputes_the_decoder_layers() -> None:
    """Under checkpointing each decoder layer's forward runs twice: first with autograd recording
    nothing (torch's reentrant checkpoint), then again in backward, recorded."""
    model, tok = load_model(ModelSpec("tiny", seed=4))
    engine = TorchTrainerEngine(
        model, TorchTrainerConfig(micro_batch_size=8, gradient_checkpointing=True), tokenizer=tok
    )
    calls = []
    layer = next(m for m in model.modules() if type(m).__name__ in model._no_split_modules)
    layer.mlp.register_forward_pre_hook(lambda *_: calls.append(torch.is_grad_enabled()))
    engine.train_step(_batch(2), maximise_logprob)
    assert calls == [False, True]  # the forward, then its recomputation


@pytest.mark.parametrize(
    ("frozen_embeddings", "use_cache"), [(False, False), (True, False), (False, True)]
)
def test_checkpointed_layers_get_the_gradients_of_plain_ones(
    frozen_embeddings: bool, use_cache: bool
) -> None:
    """float64, one backward: every trainable weight gets the gradient it gets without checkpointing.
    With the embeddings frozen (as under LoRA) the layers' input needs no gradient, and the
    reentrant checkpoint would leave the layers' weights without one; with a key-value cache its
    recomputation would write the cache twice. Such calls take the non-reentrant checkpoint."""
    ids = torch.tensor([[1, 5, 9, 3, 7, 2, 4, 8]])
    grads = []
    for checkpointed in (False, True):
        model, _ = load_model(ModelSpec("tiny", seed=4, dtype="float64"))
        model.eval()  # as the engines run it: no dropout
        model.get_input_embeddings().requires_grad_(not frozen_embeddings)
        if checkpointed:
            assert checkpoint_decoder_layers(model) == model.config.num_hidden_layers
        model(input_ids=ids, use_cache=use_cache).logits.pow(2).mean().backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    plain, checkpointed_grads = grads
    assert plain and plain.keys() == checkpointed_grads.keys()
    layer_weights = [n for n in plain if ".layers." in n]
    assert layer_weights
    for name, grad in plain.items():
        assert checkpointed_grads[name] is not None, name
        assert torch.allclose(grad, checkpointed_grads[name], rtol=0, atol=1e-12), name


def test_a_deep_copy_of_a_checkpointed_model_computes_with_its_own_weights() -> None:
    """The checkpointed forward is bound to its layer: a copy's layers run the copy's weights."""
    model, _ = load_model(ModelSpec("tiny", seed=4, dtype="float64"))
    checkpoint_decoder_layers(model)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(0.5)
    ids = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():
        ours, theirs = model(input_ids=ids).logits, twin(input_ids=ids).logits
    assert not torch.allclose(ours, theirs)
    fresh, _ = load_model(ModelSpec("tiny", seed=4, dtype="float64"))
    with torch.no_grad():
        assert torch.allclose(ours, fresh(input_ids=ids).logits, rtol=0, atol=1e-12)


def _fsdp(config: TorchTrainerConfig) -> dict[str, torch.Tensor]:
    model, tok = load_model("tiny")
    engine = TRAINER_ENGINES.get("fsdp2")(model, tok, config, TrainerPlacement(("cpu",) * 2))
    with engine:
        for s in range(2):
            assert engine.train_step(batch(s), GrpoObjective())["skipped"] == 0.0
        return dict(engine.state_dict_for_export())


def test_fsdp2_param_offload_and_checkpointing_train_the_same_weights() -> None:
    config = TorchTrainerConfig(lr=1e-3, micro_batch_size=2, use_ref_model=True)
    plain = _fsdp(config)
    memory = _fsdp(
        dataclasses.replace(
            config,
            param_offload=True,
            optimizer_offload=True,
            gradient_checkpointing=True,
            max_tokens_per_micro_batch=30,
        )
    )
    assert max_diff(plain, memory) <= 1e-5


def _config(tmp_path: Path, trainer: dict) -> Path:
    raw = yaml.safe_load(MINIMAL)
    raw["trainer"] = trainer
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_keys_load_and_act(tmp_path: Path) -> None:
    cfg = load_config(
        _config(
            tmp_path,
            {
                "use_dynamic_bsz": True,
                "ppo_max_token_len_per_gpu": 512,
                "enable_gradient_checkpointing": True,
                "optimizer_offload": True,
            },
        )
    )
    engine_config = trainer_engine_config(cfg, 10, False)
    assert engine_config.max_tokens_per_micro_batch == 512 == token_budget(cfg)
    assert engine_config.gradient_checkpointing and engine_config.optimizer_offload
    default = load_config(_config(tmp_path, {"use_dynamic_bsz": True}))
    # Trinity's default budget: twice the model's length (prompt + response limits here)
    assert token_budget(default) == 2 * (
        default.model.max_prompt_tokens + default.model.max_response_tokens
    )
    with pytest.raises(ConfigError, match="trainer.param_offload"):
        load_config(_config(tmp_path, {"param_offload": True}))
    with pytest.raises(ConfigError, match="trainer.ppo_max_token_len_per_gpu"):
        load_config(
            _config(tmp_path, {"max_token_len_per_gpu": 64, "ppo_max_token_len_per_gpu": 128})
        )
    fsdp = load_config(_config(tmp_path, {"trainer_type": "fsdp2", "param_offload": True}))
    assert trainer_engine_config(fsdp, 10, False).param_offload
