"""LoRA adapters (`model.lora_configs`): what an adapter is, how a version carries one, and how the
trainer and the explorers put one on a base model. peft is the library; it is imported only when
an adapter is attached, so this module imports everywhere.

A version of a LoRA run carries the adapter only: its tensors under peft's names
(`adapter_model.safetensors`, megabytes where the model is hundreds of them), peft's
`adapter_config.json`, and in its manifest's extra the keys of `AdapterVersion.manifest_extra`:
that it is an adapter, the base's name, and the base's fingerprint. Every loader (an explorer, a
resuming trainer) compares that fingerprint with the one of the base it holds and refuses the
version on a mismatch: an adapter on another base would load without error and sample nonsense.

The fingerprint (`base_fingerprint`) is a sha256 over each base tensor's name, shape and a strided
sample of at most 4096 of its values rounded to bfloat16, so a float32 trainer and a bfloat16
explorer of the same base agree. `lm_head.weight` is left out: one base stores it, another ties it
to the embedding. Two bases of one architecture that differ anywhere but in the unsampled values
are told apart.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rft.engines.weights import ADAPTER_SAFETENSORS, export_state_dict_names
from rft.errors import EngineError

__all__ = ["ADAPTER_SAFETENSORS", "AdapterVersion", "LoraSpec", "base_fingerprint"]

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_KIND = "lora"
DEFAULT_ADAPTER_NAME = "policy"
INIT_SEED = 0  # of the adapter's A matrices
_SAMPLE = 4096
_UNFINGERPRINTED = frozenset({"lm_head.weight"})
# the manifest extra keys of an adapter version (all strings, as manifests hold)
EXTRA_ADAPTER = "adapter"
EXTRA_BASE_NAME = "adapter_base_model"
EXTRA_BASE_FINGERPRINT = "adapter_base_fingerprint"
EXTRA_NAME = "adapter_name"


@dataclass(frozen=True)
class LoraSpec:
    """One adapter's shape: `model.lora_configs[0]` as the engines read it."""

    rank: int
    alpha: int
    target_modules: tuple[str, ...] = ("all-linear",)
    exclude_modules: tuple[str, ...] = ()
    name: str = DEFAULT_ADAPTER_NAME
    base_model: str = ""

    def peft_config(self) -> Any:
        from peft import LoraConfig

        targets: str | list[str] = (
            "all-linear" if self.target_modules == ("all-linear",) else list(self.target_modules)
        )
        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,
            target_modules=targets,
            exclude_modules=list(self.exclude_modules) or None,
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
        )


def base_fingerprint(tensors: Mapping[str, torch.Tensor]) -> str:
    """The identity of a base model's weights (HF names), whatever their dtype or device."""
    digest = hashlib.sha256()
    for name in sorted(n for n in tensors if n not in _UNFINGERPRINTED):
        tensor = tensors[name].detach()
        flat = tensor.reshape(-1)
        step = max(1, flat.numel() // _SAMPLE)
        sample = flat[::step][:_SAMPLE].to(device="cpu", dtype=torch.bfloat16).float()
        digest.update(f"{name}:{tuple(tensor.shape)};".encode())
        digest.update(sample.numpy().tobytes())
    return digest.hexdigest()[:32]


def attach(model: Any, spec: LoraSpec) -> Any:
    """`model` wrapped by peft with a fresh adapter (A random, B zero: the base's function), only
    the adapter trainable. A is drawn from a fixed seed, whatever the process did before, so
    two trainings of the same experiences give the same adapter."""
    from peft import get_peft_model

    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(INIT_SEED)
            wrapped = get_peft_model(model, spec.peft_config())
    except (ValueError, TypeError) as exc:
        raise EngineError(
            f"model.lora_configs: cannot put a LoRA adapter on the model: {exc}"
        ) from exc
    for name, param in wrapped.named_parameters():
        param.requires_grad_("lora_" in name)
    return wrapped


def adapter_tensors(wrapped: Any) -> dict[str, torch.Tensor]:
    """The adapter's tensors under peft's saved names (`...q_proj.lora_A.weight`)."""
    from peft import get_peft_model_state_dict

    # the embeddings are never trained here (no lookup of the base's files to ask)
    return dict(get_peft_model_state_dict(wrapped, save_embedding_layers=False))


def load_adapter_tensors(wrapped: Any, tensors: Mapping[str, torch.Tensor], source: str) -> None:
    """Copy an adapter's tensors into `wrapped` in place (the optimizer keeps its parameters);
    EngineError naming `source` unless they are exactly this adapter's names and shapes."""
    from peft import set_peft_model_state_dict

    own = adapter_tensors(wrapped)
    missing, unknown = sorted(set(own) - set(tensors)), sorted(set(tensors) - set(own))
    if missing or unknown:
        raise EngineError(
            f"{source}: the adapter's tensors are not this adapter's: missing {missing[:3]}, "
            f"unknown {unknown[:3]} (another rank or target_modules?)"
        )
    for name, value in tensors.items():
        if tuple(value.shape) != tuple(own[name].shape):
            raise EngineError(
                f"{source}: adapter tensor {name} has shape {tuple(value.shape)}, this "
                f"adapter's is {tuple(own[name].shape)}"
            )
    with torch.no_grad():
        set_peft_model_state_dict(wrapped, dict(tensors))


def write_adapter_config(wrapped: Any, directory: Path, base_model: str) -> None:
    """peft's adapter_config.json of `wrapped` into `directory` (what vLLM and peft read)."""
    config = copy.copy(wrapped.peft_config["default"])  # the live one stays as it is
    config.base_model_name_or_path = base_model
    config.save_pretrained(str(directory))


@dataclass(frozen=True)
class AdapterVersion:
    """An adapter version as a loader receives it: tensors, peft's config, and its base."""

    tensors: dict[str, torch.Tensor]
    config: dict[str, Any]
    base_fingerprint: str
    base_model: str = ""
    name: str = DEFAULT_ADAPTER_NAME
    files: Mapping[str, Any] = field(default_factory=dict)  # the version's files, for vLLM

    @staticmethod
    def manifest_extra(spec: LoraSpec, fingerprint: str) -> dict[str, str]:
        return {
            EXTRA_ADAPTER: ADAPTER_KIND,
            EXTRA_NAME: spec.name,
            EXTRA_BASE_NAME: spec.base_model,
            EXTRA_BASE_FINGERPRINT: fingerprint,
        }

    @classmethod
    def of_files(
        cls,
        extra: Mapping[str, Any],
        files: Mapping[str, Any],
        tensors: dict[str, torch.Tensor],
        source: str,
    ) -> AdapterVersion:
        if ADAPTER_CONFIG not in files:
            raise EngineError(f"{source}: an adapter version without {ADAPTER_CONFIG}")
        try:
            config = json.loads(bytes(files[ADAPTER_CONFIG]))
        except ValueError as exc:
            raise EngineError(f"{source}{ADAPTER_CONFIG}: unreadable: {exc}") from exc
        return cls(
            tensors=tensors,
            config=config,
            base_fingerprint=str(extra.get(EXTRA_BASE_FINGERPRINT, "")),
            base_model=str(extra.get(EXTRA_BASE_NAME, "")),
            name=str(extra.get(EXTRA_NAME, DEFAULT_ADAPTER_NAME)),
            files=files,
        )

    def check_base(self, fingerprint: str, version: int, holder: str) -> None:
        """EngineError unless this adapter was trained on the base whose fingerprint is given."""
        if self.base_fingerprint != fingerprint:
            raise EngineError(
                f"weight version {version} is a LoRA adapter on base {self.base_model!r} "
                f"(fingerprint {self.base_fingerprint}), but {holder} holds a base with "
                f"fingerprint {fingerprint}: it is not applied"
            )


def is_adapter(extra: Mapping[str, Any]) -> bool:
    """Whether a manifest's extra says its version is an adapter."""
    return extra.get(EXTRA_ADAPTER) == ADAPTER_KIND


def peft_config_of(config: Mapping[str, Any]) -> Any:
    """peft's LoraConfig from an adapter_config.json's fields (unknown fields left out)."""
    import dataclasses

    from peft import LoraConfig

    # the base is this engine's own, checked by fingerprint: its recorded name is not needed
    names = {f.name for f in dataclasses.fields(LoraConfig)} - {"base_model_name_or_path"}
    return LoraConfig(**{k: v for k, v in config.items() if k in names})


class AdapterOnModel:
    """An explorer's HF model with the newest adapter version on it (peft), fingerprint-checked.

    The first adapter wraps the model; later ones copy their tensors into the same layers.
    """

    def __init__(self, model: Any) -> None:
        self.base = model
        self.wrapped: Any = None
        self._fingerprint: str | None = None

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            state = self.base.state_dict()
            named = {n: state[n] for n in export_state_dict_names(state)}
            self._fingerprint = base_fingerprint(named)
        return self._fingerprint

    def apply(self, adapter: AdapterVersion, version: int) -> Any:
        """Put `adapter` on the model; returns the model to generate with."""
        adapter.check_base(self.fingerprint(), version, "this explorer")
        if self.wrapped is None:
            from peft import get_peft_model

            self.wrapped = get_peft_model(self.base, peft_config_of(adapter.config))
            self.wrapped.requires_grad_(False)
            self.wrapped.eval()
        load_adapter_tensors(self.wrapped, adapter.tensors, f"weight version {version}")
        return self.wrapped
