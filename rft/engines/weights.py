"""Moving weights in and out of a model under HF parameter names.

`export_state_dict` gives each stored tensor once (a tied lm_head is left out, since it *is* the
input embedding); `load_weights_into` copies tensors in place, so ties and the optimizer's
references to parameters survive; `read_safetensors_dir` reads an HF directory's weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from rft.errors import EngineError


def export_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """HF-named tensors of `model`, detached, on CPU, each storage exported once.

    When two names share storage (tied embeddings) the first name in state_dict order is kept,
    which for HF causal LMs is the input embedding (`model.embed_tokens.weight`).
    """
    state = model.state_dict()
    return {
        name: state[name].detach().to("cpu", copy=True).contiguous()
        for name in export_state_dict_names(state)
    }


def export_state_dict_names(state: dict[str, torch.Tensor]) -> list[str]:
    """Names of `state` in order, leaving out names whose storage an earlier name holds."""
    names: list[str] = []
    seen: set[tuple[int, int, tuple[int, ...]]] = set()
    for name, tensor in state.items():
        key = (
            tensor.untyped_storage().data_ptr(),
            int(tensor.storage_offset()),
            tuple(int(d) for d in tensor.shape),
        )
        if key not in seen:
            seen.add(key)
            names.append(name)
    return names


def load_weights_into(model: Any, tensors: dict[str, torch.Tensor], *, strict: bool = True) -> int:
    """Copy `tensors` (HF names) into `model` in place; returns how many tensors were copied.

    Unknown names and shape mismatches raise EngineError. With `strict`, every non-aliased model
    tensor must be present, so a partial checkpoint can't half-update a model unnoticed.
    """
    state = model.state_dict()
    unknown = sorted(set(tensors) - set(state))
    if unknown:
        raise EngineError(f"weights name tensors the model doesn't have: {unknown[:5]}")
    aliases = set(state) - set(export_state_dict_names(state))
    if strict:
        missing = sorted(set(state) - set(tensors) - aliases)
        if missing:
            raise EngineError(f"weights miss {len(missing)} model tensors, e.g. {missing[:5]}")
    for name, value in tensors.items():
        target = state[name]
        if tuple(value.shape) != tuple(target.shape):
            raise EngineError(
                f"weight {name}: shape {tuple(value.shape)} != model's {tuple(target.shape)}"
            )
    with torch.no_grad():
        for name, value in tensors.items():
            state[name].copy_(value.to(device=state[name].device, dtype=state[name].dtype))
    return len(tensors)


def read_safetensors_dir(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of an HF directory: model.safetensors or a sharded index."""
    from safetensors.torch import load_file

    root = Path(path)
    single = root / "model.safetensors"
    index = root / "model.safetensors.index.json"
    try:
        if single.is_file():
            return load_file(str(single))
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            out: dict[str, torch.Tensor] = {}
            for shard in shards:
                out.update(load_file(str(root / shard)))
            return out
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
        raise EngineError(f"{root}: cannot read safetensors weights: {exc}") from exc
    raise EngineError(f"{root}: no model.safetensors or model.safetensors.index.json")
