"""The torch trainer engine training a LoRA adapter (`model.lora_configs`) instead of the model.

The base model is frozen and wrapped by peft; AdamW holds the adapter's parameters only. What
leaves the engine is the adapter: `export_weights` gives its tensors under peft's names,
`save_hf` adds peft's adapter_config.json beside the model config, `load_weights` takes an
adapter back (resume), and `version_extra` tells the checkpointer to say in the manifest that the
version is an adapter on this base (rft.engines.lora). The KL reference, when the algorithm needs
one, is the same model with the adapter switched off: the base, without a second copy of it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from rft.engines import lora
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine
from rft.engines.weights import export_state_dict_names
from rft.errors import EngineError


class _AdapterOff:
    """The wrapped model called with its adapter disabled: the base model's function."""

    config = None  # no separable head: token_logprobs takes the plain forward

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def __call__(self, **kwargs: Any) -> Any:
        with self._wrapped.disable_adapter():
            return self._wrapped(**kwargs)


class LoraTrainerEngine(TorchTrainerEngine):
    """AdamW on a LoRA adapter of `model`; the base weights never change."""

    def __init__(
        self, model: Any, config: TorchTrainerConfig, spec: lora.LoraSpec, *, tokenizer: Any = None
    ) -> None:
        state = model.state_dict()
        self.base_fingerprint = lora.base_fingerprint(
            {n: state[n] for n in export_state_dict_names(state)}
        )
        model.requires_grad_(False)
        wrapped = lora.attach(model, spec)
        self.spec = spec
        super().__init__(
            wrapped, dataclasses.replace(config, use_ref_model=False), tokenizer=tokenizer
        )
        self.config = config
        self.ref_model = _AdapterOff(wrapped) if config.use_ref_model else None

    def version_extra(self) -> dict[str, str]:
        return lora.AdapterVersion.manifest_extra(self.spec, self.base_fingerprint)

    def state_dict_for_export(self) -> dict[str, torch.Tensor]:
        return {
            k: v.detach().to("cpu", copy=True).contiguous()
            for k, v in lora.adapter_tensors(self.model).items()
        }

    def export_weights(
        self, dtype: torch.dtype | None = None, *, owned: bool = False
    ) -> dict[str, torch.Tensor]:
        return {
            k: v.detach().to(device="cpu", dtype=dtype or v.dtype, copy=owned).contiguous()
            for k, v in lora.adapter_tensors(self.model).items()
        }

    def save_hf(
        self, directory: str | Path, dtype: torch.dtype | None = None, *, weights: bool = True
    ) -> Path:
        """The base's config and tokenizer files, peft's adapter_config.json, and with
        `weights` the adapter's tensors (adapter_model.safetensors)."""
        path = super().save_hf(directory, dtype, weights=False)
        try:
            lora.write_adapter_config(self.model, path, self.spec.base_model)
        except (OSError, ValueError) as exc:
            raise EngineError(f"{path}: cannot save the adapter config: {exc}") from exc
        if weights:
            self.save_weights(path / lora.ADAPTER_SAFETENSORS, dtype)
        return path

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        lora.load_adapter_tensors(self.model, tensors, "the adapter to load")
