"""LoRA (`model.lora_configs`) on the tiny model: the trainer trains the adapter only and exports
it alone; an explorer's HF engine with the adapter applied computes what the trainer's model
computes; the base fingerprint tells bases apart whatever their dtype; config keys that cannot be
honoured are refused at load, naming the key."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

import pytest
import torch
import yaml

from rft.catalog import load_config
from rft.consumers.trainer.trainer import lora_spec
from rft.engines.logprobs import token_logprobs
from rft.engines.lora import ADAPTER_CONFIG, AdapterVersion, LoraSpec, attach, base_fingerprint
from rft.engines.models import ModelSpec, load_model
from rft.engines.rollout import HFRolloutEngine
from rft.engines.trainer import TRAINER_ENGINES, TorchTrainerConfig, TrainerPlacement
from rft.engines.weights import ADAPTER_SAFETENSORS, export_state_dict
from rft.errors import ConfigError, EngineError
from tests.unit.config_samples import MINIMAL
from tests.unit.test_engines_trainer import _batch, maximise_logprob

pytest.importorskip("peft")

SPEC = LoraSpec(rank=4, alpha=8, base_model="tiny")


def _lora_engine(seed: int = 2, use_ref: bool = False):
    model, tok = load_model(ModelSpec("tiny", seed=seed))
    config = TorchTrainerConfig(lr=1e-2, micro_batch_size=2, lora=SPEC, use_ref_model=use_ref)
    engine = TRAINER_ENGINES.get("torch")(model, tok, config, TrainerPlacement())
    return engine, tok


def _logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, start=0)
    return lp


def test_the_trainer_trains_the_adapter_and_never_the_base() -> None:
    engine, _ = _lora_engine()
    base_before = {
        n: p.detach().clone() for n, p in engine.model.named_parameters() if "lora_" not in n
    }
    trainable = [n for n, p in engine.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    adapter_before = {k: v.clone() for k, v in engine.export_weights().items()}
    for _ in range(3):
        metrics = engine.train_step(_batch(4), maximise_logprob)
        assert metrics["skipped"] == 0.0
    after = engine.export_weights()
    # the adapter moved (B starts at zero and no longer is), the base did not
    assert set(after) == set(adapter_before)
    assert any(not torch.equal(after[n], adapter_before[n]) for n in after)
    for n, p in engine.model.named_parameters():
        if "lora_" not in n:
            assert torch.equal(p, base_before[n]), n
    # what a version carries is the adapter: a small fraction of the model's bytes
    adapter_bytes = sum(t.numel() * t.element_size() for t in after.values())
    model_bytes = sum(t.numel() * t.element_size() for t in base_before.values())
    assert adapter_bytes < model_bytes / 5
    assert engine.version_extra()["adapter"] == "lora"
    assert engine.version_extra()["adapter_base_fingerprint"] == engine.base_fingerprint


def test_an_hf_explorer_with_the_adapter_computes_the_trainers_logprobs() -> None:
    engine, tok = _lora_engine()
    for _ in range(2):
        engine.train_step(_batch(4), maximise_logprob)
    with tempfile.TemporaryDirectory() as tmp:
        engine.save_hf(tmp)
        files = {p.name: bytearray(p.read_bytes()) for p in Path(tmp).iterdir()}
    assert ADAPTER_SAFETENSORS in files and ADAPTER_CONFIG in files
    assert json.loads(files[ADAPTER_CONFIG])["r"] == SPEC.rank
    base, _ = load_model(ModelSpec("tiny", seed=2))
    explorer = HFRolloutEngine(base, tok)
    ids = torch.tensor([[5, 9, 14, 33, 71, 2, 8]])
    before = _logprobs(explorer.model, ids)
    adapter = AdapterVersion.of_files(
        engine.version_extra(), files, engine.export_weights(), "test://v1/"
    )
    explorer.load_adapter(adapter, 1)
    assert explorer.model_version == 1
    applied = _logprobs(explorer.model, ids)
    trained = _logprobs(engine.model, ids)
    assert not torch.allclose(before, trained, atol=1e-4)  # the adapter changed the function
    assert torch.allclose(applied, trained, atol=1e-5)
    # a second version hot-swaps into the same adapter layers
    engine.train_step(_batch(4, seed=1), maximise_logprob)
    explorer.load_adapter(
        AdapterVersion.of_files(engine.version_extra(), files, engine.export_weights(), "v2"), 2
    )
    assert torch.allclose(_logprobs(explorer.model, ids), _logprobs(engine.model, ids), atol=1e-5)
    # a run's versions are all adapters: full weights are refused from now on
    with pytest.raises(EngineError, match="all adapters or all full weights"):
        explorer.load_state_dict(export_state_dict(base), 3)


def test_an_adapter_on_another_base_is_refused() -> None:
    engine, tok = _lora_engine(seed=2)
    other, _ = load_model(ModelSpec("tiny", seed=3))
    explorer = HFRolloutEngine(other, tok)
    with tempfile.TemporaryDirectory() as tmp:
        engine.save_hf(tmp)
        files = {p.name: bytearray(p.read_bytes()) for p in Path(tmp).iterdir()}
    adapter = AdapterVersion.of_files(engine.version_extra(), files, engine.export_weights(), "v1")
    with pytest.raises(EngineError, match="LoRA adapter on base 'tiny'.*is not applied"):
        explorer.load_adapter(adapter, 1)
    assert explorer.model_version == 0


def test_the_fingerprint_is_the_bases_whatever_its_dtype() -> None:
    model, _ = load_model(ModelSpec("tiny", seed=2))
    state = export_state_dict(model)
    half = {n: t.to(torch.bfloat16) for n, t in state.items()}
    assert base_fingerprint(state) == base_fingerprint(half)
    moved = copy.deepcopy(state)
    name = next(n for n in moved if n.endswith("q_proj.weight"))
    moved[name] = moved[name] + 0.5
    assert base_fingerprint(moved) != base_fingerprint(state)


def test_the_reference_is_the_base_without_a_second_copy() -> None:
    engine, _ = _lora_engine(use_ref=True)
    for _ in range(2):
        engine.train_step(_batch(4), maximise_logprob)
    base, _ = load_model(ModelSpec("tiny", seed=2))
    batch = _batch(3, seed=5)
    ref = engine.reference_logprobs(batch)["ref_logprobs"]
    plain = copy.deepcopy(engine)
    plain.ref_model = base
    assert torch.allclose(ref, plain.reference_logprobs(batch)["ref_logprobs"], atol=1e-5)


def test_the_adapter_is_loaded_back_for_a_resume() -> None:
    engine, _ = _lora_engine()
    engine.train_step(_batch(4), maximise_logprob)
    saved = engine.export_weights()
    fresh, _ = _lora_engine()
    fresh.load_weights({k: v.clone() for k, v in saved.items()})
    assert all(torch.equal(fresh.export_weights()[k], v) for k, v in saved.items())
    with pytest.raises(EngineError, match="not this adapter's"):
        fresh.load_weights({k + ".x": v for k, v in saved.items()})


def _config(tmp_path: Path, lora: object, **top: object) -> Path:
    raw = yaml.safe_load(MINIMAL)
    raw["model"]["lora_configs"] = lora
    raw.update(top)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_keys_load_and_those_that_cannot_be_honoured_are_refused(tmp_path: Path) -> None:
    entry = {"lora_rank": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj", "o_proj"]}
    named = {**entry, "name": "arith", "exclude_modules": ["o_proj"], "base_model_name": "b"}
    spec = lora_spec(load_config(_config(tmp_path, [named])))
    assert spec == LoraSpec(8, 16, ("q_proj", "v_proj", "o_proj"), ("o_proj",), "arith", "b")
    # what the trainer builds from it: adapters on q_proj and v_proj, none on o_proj
    model, _ = load_model(ModelSpec("tiny", seed=2))
    wrapped = attach(model, spec)
    adapted = {
        n.split(".lora_A")[0].rsplit(".", 1)[-1]
        for n, _ in wrapped.named_parameters()
        if "lora_A" in n
    }
    assert adapted == {"q_proj", "v_proj"}
    assert wrapped.peft_config["default"].lora_alpha / spec.rank == 2.0
    default = lora_spec(load_config(_config(tmp_path, [{}])))
    assert default == LoraSpec(32, 32, ("all-linear",), (), "policy", "tiny")
    refusals = {
        "model.lora_configs[0].path": [{**entry, "path": "/some/adapter"}],
        "model.lora_configs[0].lora_dropout": [{**entry, "lora_dropout": 0.1}],
        "model.lora_configs[0].lora_dtype": [{**entry, "lora_dtype": "float16"}],
        "`model.lora_configs` 2 adapters": [entry, entry],
    }
    for where, value in refusals.items():
        with pytest.raises(ConfigError, match=where.replace("[", r"\[").replace("]", r"\]")):
            load_config(_config(tmp_path, value))
    for trainer in ({"trainer_type": "fsdp2"}, {"trainer_strategy": "fsdp2"}):
        with pytest.raises(ConfigError, match="fsdp2 trainer engine trains full models only"):
            load_config(_config(tmp_path, [entry], trainer=trainer))
    with pytest.raises(ConfigError, match="rollout engine 'replay' cannot apply adapter"):
        load_config(
            _config(
                tmp_path,
                [entry],
                explorer={"rollout_model": {"engine_type": "replay", "engine_args": {"path": "x"}}},
            )
        )


def test_the_lora_example_is_the_arithmetic_example_with_an_adapter() -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"
    full = load_config(examples / "arithmetic.yaml")
    lora = load_config(examples / "arithmetic_lora.yaml")
    assert lora_spec(full) is None
    spec = lora_spec(lora)
    assert spec is not None and (spec.rank, spec.alpha, spec.name) == (32, 64, "arithmetic")
    # the same task, algorithm and evaluation: only the adapter, the lr and the sizes differ
    assert lora.algorithm == full.algorithm
    assert lora.buffer.explorer_input.eval_tasksets == full.buffer.explorer_input.eval_tasksets
    assert lora.buffer.explorer_input.taskset.generator_args == (
        full.buffer.explorer_input.taskset.generator_args
    )
    assert lora.cluster.gpu_per_node == 1 and lora.trainer.optim.lr == 10 * full.trainer.optim.lr


def test_the_vllm_engine_is_sized_for_the_adapter(tmp_path: Path) -> None:
    """vLLM itself runs on the GPU machine (infra/gpu/measure.sh lora vllm); here: the plan hands
    the adapter's rank to the engine, which asks vLLM for the smallest maximum that covers it."""
    from rft.consumers.run_plan import RunPlan
    from rft.engines.vllm_engine import lora_args

    plan = RunPlan(load_config(_config(tmp_path, [{"lora_rank": 24}])))
    assert plan.rollout_engine_config().options["max_lora_rank"] == 24
    assert lora_args(24) == {"enable_lora": True, "max_lora_rank": 32, "max_loras": 2}
    assert lora_args(None) == {}
    with pytest.raises(ConfigError, match="lora_rank: 100000"):
        lora_args(100000)
