"""Moving weights in and out of a model under HF parameter names.

`export_state_dict` gives each stored tensor once (a tied lm_head is left out, since it *is* the
input embedding); `load_weights_into` copies tensors in place, so ties and the optimizer's
references to parameters survive; `read_safetensors_dir` reads an HF directory's weights.

Weights also travel as safetensors bytes without a file: `SafetensorsPayload` streams tensors
as one safetensors file straight from their memory (nothing serialized ahead),
`safetensors_payloads` cuts a version's weights into HF-style shards that move and hash in
parallel, and `tensors_of_files` views a downloaded version's tensors in place (no copy, no
disk).
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch

from rft.errors import EngineError
from rft.storage.payload import BytesPayload

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
ADAPTER_SAFETENSORS = "adapter_model.safetensors"  # peft's name: a LoRA version's tensors

# safetensors' dtype codes (its format's own names)
_CODES: dict[torch.dtype, str] = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
_DTYPES = {code: dtype for dtype, code in _CODES.items()}


def safetensors_dtypes() -> frozenset[torch.dtype]:
    """The tensor dtypes a safetensors file holds (what `SafetensorsPayload` streams)."""
    return frozenset(_CODES)


#: A version's weights are cut into shards of at least this many bytes (HF's sharded layout:
#: model-0000k-of-0000n.safetensors and an index), at most _MAX_SHARDS of them: the store
#: moves and hashes a version's files several at once, so each shard is a core's worth of
#: sha256 on both sides (a single file is one serial digest, about 0.15 s per 257 MiB). 32 MiB
#: cuts SmolLM2's 257 MiB of bf16 into 8 files, as many as the store moves at once
#: (rft.storage.checkpoint_store.TRANSFER_THREADS).
SHARD_BYTES = 32 << 20
_MAX_SHARDS = 16


def shard_names(
    tensors: Mapping[str, torch.Tensor], shard_bytes: int = SHARD_BYTES
) -> list[list[str]]:
    """The tensors' names cut into consecutive groups (in name order) of about equal bytes:
    one group under `2 * shard_bytes`, else up to _MAX_SHARDS. A tensor is never split."""
    names = sorted(tensors)
    sizes = [tensors[n].numel() * tensors[n].element_size() for n in names]
    total = sum(sizes)
    count = max(1, min(_MAX_SHARDS, total // max(shard_bytes, 1), len(names)))
    groups: list[list[str]] = [[]]
    done = 0
    for name, size in zip(names, sizes, strict=True):
        # a new group starts once this one holds its share of the bytes
        if groups[-1] and len(groups) < count and done >= total * len(groups) / count:
            groups.append([])
        groups[-1].append(name)
        done += size
    return groups


def safetensors_payloads(
    tensors: Mapping[str, torch.Tensor],
    metadata: Mapping[str, str] | None = None,
    shard_bytes: int = SHARD_BYTES,
) -> dict[str, SafetensorsPayload | BytesPayload]:
    """`tensors` (on CPU) as a version's weight files, streamed from their memory: one
    model.safetensors, or shards and model.safetensors.index.json (HF's names, so a downloaded
    version is an HF directory). `tensors_of_files` reads either."""
    groups = shard_names(tensors, shard_bytes)
    if len(groups) == 1:
        return {SAFETENSORS: SafetensorsPayload(tensors, metadata)}
    files: dict[str, SafetensorsPayload | BytesPayload] = {}
    weight_map: dict[str, str] = {}
    for k, group in enumerate(groups, start=1):
        shard = f"model-{k:05d}-of-{len(groups):05d}.safetensors"
        files[shard] = SafetensorsPayload({n: tensors[n] for n in group}, metadata)
        weight_map.update(dict.fromkeys(group, shard))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    files[SAFETENSORS_INDEX] = BytesPayload(json.dumps(index, sort_keys=True).encode())
    return files


class SafetensorsPayload:
    """`tensors` (on CPU) as the bytes of one safetensors file, read from the tensors' own
    memory: a checkpoint `Payload` (rft.storage.payload) that costs no serialized copy. The
    tensors must stay unchanged until the upload is done.

    Larger element types come first (then names), so every tensor starts aligned to its size.
    """

    def __init__(
        self, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None
    ) -> None:
        header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
        views: list[memoryview] = []
        offset = 0
        order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
        for name in order:
            tensor = tensors[name].detach()
            if tensor.device.type != "cpu" or tensor.dtype not in _CODES:
                raise EngineError(
                    f"weight {name}: {tensor.dtype} on {tensor.device} cannot be streamed as "
                    "safetensors (CPU tensors of a safetensors dtype only)"
                )
            flat = tensor.contiguous().reshape(-1).view(torch.uint8)
            views.append(memoryview(cast(Any, flat.numpy())))
            end = offset + flat.numel()
            header[name] = {
                "dtype": _CODES[tensor.dtype],
                "shape": list(tensor.shape),
                "data_offsets": [offset, end],
            }
            offset = end
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # the data starts 8-aligned
        self._parts = [memoryview(struct.pack("<Q", len(raw)) + raw), *views]
        self._size = sum(p.nbytes for p in self._parts)

    @property
    def size(self) -> int:
        return self._size

    def open(self) -> _PartsReader:
        return _PartsReader(self._parts)


class _PartsReader:
    """Reads consecutive memoryviews as one stream; each read returns a view (no copy)."""

    def __init__(self, parts: list[memoryview]) -> None:
        self._parts = parts
        self._index = 0
        self._at = 0

    def read(self, size: int = -1, /) -> memoryview:
        while self._index < len(self._parts):
            part = self._parts[self._index]
            if self._at < part.nbytes:
                end = part.nbytes if size < 0 else min(part.nbytes, self._at + size)
                piece = part[self._at : end]
                self._at = end
                return piece
            self._index += 1
            self._at = 0
        return memoryview(b"")

    def seek(self, offset: int, whence: int = 0, /) -> int:
        if (offset, whence) != (0, io.SEEK_SET):
            raise ValueError("a tensor stream can only go back to its start")
        self._index = self._at = 0
        return 0

    def close(self) -> None:
        return None


def tensors_from_safetensors(
    buffer: memoryview | bytearray, source: str
) -> dict[str, torch.Tensor]:
    """The tensors of safetensors bytes, as views into `buffer` (which they keep alive).

    EngineError naming `source` when the bytes are not a well-formed safetensors file.
    """
    try:
        (length,) = struct.unpack_from("<Q", buffer, 0)
        if length > len(buffer) - 8:
            raise ValueError(f"header of {length} bytes in a file of {len(buffer)}")
        header = json.loads(bytes(memoryview(buffer)[8 : 8 + length]))
        base = 8 + length
        out: dict[str, torch.Tensor] = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype = _DTYPES[info["dtype"]]
            begin, end = (int(x) for x in info["data_offsets"])
            shape = [int(d) for d in info["shape"]]
            size = torch.empty((), dtype=dtype).element_size()
            count = (end - begin) // size
            if begin < 0 or end < begin or base + end > len(buffer) or count * size != end - begin:
                raise ValueError(f"{name}: data offsets {begin}-{end} out of the file")
            if count != (torch.Size(shape).numel()):
                raise ValueError(f"{name}: {count} elements for shape {shape}")
            if count == 0:
                out[name] = torch.empty(shape, dtype=dtype)
            elif (base + begin) % size:  # unaligned: a copy of its own
                data = bytearray(memoryview(buffer)[base + begin : base + end])
                out[name] = torch.frombuffer(data, dtype=dtype).reshape(shape)
            else:
                view = torch.frombuffer(buffer, dtype=dtype, count=count, offset=base + begin)
                out[name] = view.reshape(shape)
        return out
    except (struct.error, ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise EngineError(f"{source}: not a readable safetensors file: {exc}") from exc


def tensors_of_files(
    files: Mapping[str, memoryview | bytearray], source: str
) -> dict[str, torch.Tensor]:
    """The weights among a version's downloaded files (an HF directory's names): one
    model.safetensors or the shards its index names, or a LoRA version's
    adapter_model.safetensors. Views into the buffers, no copies."""
    for single in (SAFETENSORS, ADAPTER_SAFETENSORS):
        if single in files:
            return tensors_from_safetensors(files[single], f"{source}{single}")
    if SAFETENSORS_INDEX in files:
        try:
            shards = sorted(set(json.loads(bytes(files[SAFETENSORS_INDEX]))["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise EngineError(f"{source}{SAFETENSORS_INDEX}: unreadable index: {exc}") from exc
        out: dict[str, torch.Tensor] = {}
        for shard in shards:
            if shard not in files:
                raise EngineError(f"{source}: the index names {shard}, which is not there")
            out.update(tensors_from_safetensors(files[shard], f"{source}{shard}"))
        return out
    raise EngineError(f"{source}: no {SAFETENSORS}, {SAFETENSORS_INDEX} or {ADAPTER_SAFETENSORS}")


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
