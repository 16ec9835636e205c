"""A training state (optimizer moments, schedule, step: nested dicts, lists and tuples holding
tensors) as files that stream from the tensors' own memory, and back.

`torch.save` into memory builds the whole file before a byte of it moves: at 1.5B parameters a
second copy of about 18 GB of AdamW moments and master weights on the host, and a write several
times slower (bench/state_write.py). Here the tensors go out as safetensors
shards read straight from their memory (`rft.engines.weights.safetensors_payloads`: several
files, hashed and uploaded at once, like a version's weights), and the rest (the structure,
hyperparameters, counters) as one small `torch.save` file, `skeleton.pt`, in which each tensor is
a marker naming its entry in the shards. Reading back rebuilds the same structure, each tensor a
view into the downloaded buffer.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Mapping
from typing import Any

import torch

from rft.engines.weights import (
    SHARD_BYTES,
    safetensors_dtypes,
    safetensors_payloads,
    tensors_of_files,
)
from rft.errors import EngineError
from rft.storage.payload import BytesPayload, Payload

#: The file holding everything but the tensors.
SKELETON = "skeleton.pt"
_MARK = "__rft_tensor__"  # {_MARK: name}: the tensor stored under `name`


def state_payloads(state: Any, shard_bytes: int = SHARD_BYTES) -> dict[str, Payload]:
    """`state` as files (names relative to the state's directory): `skeleton.pt` and the
    tensors' safetensors files. CPU tensors of a safetensors dtype stream from their memory,
    which must stay unchanged until the upload is done (a snapshot's copies do); any other
    tensor stays in the skeleton."""
    tensors: dict[str, torch.Tensor] = {}
    skeleton = _strip(state, (), tensors)
    buffer = io.BytesIO()
    torch.save(skeleton, buffer)
    files: dict[str, Payload] = {SKELETON: BytesPayload(buffer.getbuffer())}
    if tensors:
        files.update(safetensors_payloads(tensors, None, shard_bytes))
    return files


def is_state_files(files: Mapping[str, Any]) -> bool:
    """Whether `files` (names relative to a directory) are a state written by `state_payloads`."""
    return SKELETON in files


def state_from_files(files: Mapping[str, memoryview | bytearray], source: str) -> Any:
    """The state `state_payloads` wrote, from its downloaded files (names relative to its
    directory; `source` names that directory in errors). Tensors are views into the buffers."""
    if SKELETON not in files:
        raise EngineError(f"{source}: no {SKELETON}: not a training state")
    try:
        skeleton = torch.load(io.BytesIO(files[SKELETON]), map_location="cpu", weights_only=True)
    except (RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as exc:
        raise EngineError(f"{source}{SKELETON}: unreadable: {exc}") from exc
    rest = {name: data for name, data in files.items() if name != SKELETON}
    tensors = tensors_of_files(rest, source) if rest else {}
    return _fill(skeleton, tensors, source)


def _strip(value: Any, path: tuple[str, ...], tensors: dict[str, torch.Tensor]) -> Any:
    """`value` with each streamable tensor moved into `tensors` under the path of keys that
    leads to it (repr of each key: 0 and '0' stay apart) and replaced by a marker."""
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu" or value.dtype not in safetensors_dtypes():
            return value
        name = "/".join(path)
        tensors[name] = value
        return {_MARK: name}
    if isinstance(value, dict):
        return {key: _strip(item, (*path, repr(key)), tensors) for key, item in value.items()}
    if isinstance(value, list):
        return [_strip(item, (*path, str(k)), tensors) for k, item in enumerate(value)]
    if isinstance(value, tuple):
        return tuple(_strip(item, (*path, str(k)), tensors) for k, item in enumerate(value))
    return value


def _fill(value: Any, tensors: Mapping[str, torch.Tensor], source: str) -> Any:
    if isinstance(value, dict):
        if set(value) == {_MARK}:
            name = value[_MARK]
            if name not in tensors:
                raise EngineError(f"{source}: the state names tensor {name!r}, which is not there")
            return tensors[name]
        return {key: _fill(item, tensors, source) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill(item, tensors, source) for item in value]
    if isinstance(value, tuple):
        return tuple(_fill(item, tensors, source) for item in value)
    return value
