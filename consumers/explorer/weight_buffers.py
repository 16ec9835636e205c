"""The host buffers an explorer downloads a version's weight files into, kept from one version to
the next.

A model's weight files have the same names and sizes in every version, so each version fills the
buffers the last one filled instead of new ones: no fresh pages to fault in per version. For an
engine whose weights live on a GPU the buffers are pinned (page-locked): the copy to the device
reads them at the bus's full speed, where memory the driver cannot address directly goes through
its own staging copy first. The cost is one version's weights held on the host for the
explorer's life (pinned on a GPU host).

A buffer is filled again only by the next version's download (or its prefetch, which begins once
the last version is loaded), after the engine's `load_state_dict` returned (engines copy what it
gets: RolloutEngine's contract). Only full-weight files are kept; an adapter version's files,
which an engine may hold on to, and anything else land in buffers of their own.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, cast

import torch

from rft.engines.lora import is_adapter
from rft.storage.checkpoint_manifest import CheckpointManifest, ManifestFile

log = logging.getLogger(__name__)

_WEIGHT_SUFFIX = ".safetensors"


class WeightBuffers:
    """`CheckpointStore.read_files`' `into`: a kept buffer for each weight file of a full
    version, by name and size. `settle()` after each download lets go of those a complete
    version did not use."""

    def __init__(self, pinned: bool) -> None:
        self.pinned = pinned
        self._held: dict[tuple[str, int], torch.Tensor] = {}
        self._used: set[tuple[str, int]] = set()
        self._lock = threading.Lock()  # files download on several threads at once

    def __call__(self, manifest: CheckpointManifest, entry: ManifestFile) -> memoryview | None:
        if is_adapter(manifest.extra) or not entry.name.endswith(_WEIGHT_SUFFIX):
            return None
        if "/" in entry.name:  # a trainer's own files (its state, master weights): not served
            return None
        return self._take((entry.name, entry.size), allocate=True)

    def kept(self, name: str, size: int) -> memoryview | None:
        """The buffer kept for weight file `name` of `size` bytes, if there is one (never a new
        one): where a prefetch of the next version lands (rft.storage.checkpoint_prefetch), so
        a version the last one did not prepare for (the first, an adapter's) is not
        prefetched."""
        return self._take((name, size), allocate=False)

    def _take(self, key: tuple[str, int], allocate: bool) -> memoryview | None:
        """The buffer held for `key` (a new one if there is none and `allocate`), marked as used
        by this version."""
        with self._lock:
            buffer = self._held.get(key)
            if buffer is None:
                if not allocate:
                    return None
                buffer = self._held[key] = self._allocate(key[1])
            self._used.add(key)
        return memoryview(cast(Any, buffer.numpy()))

    def _allocate(self, size: int) -> torch.Tensor:
        if self.pinned:
            try:
                return torch.empty(size, dtype=torch.uint8, pin_memory=True)
            except RuntimeError as exc:  # no CUDA here after all, or the pinned limit
                log.warning(
                    "weight buffers: cannot pin %d bytes (%s); using pageable memory", size, exc
                )
                self.pinned = False
        return torch.empty(size, dtype=torch.uint8)

    def settle(self, complete: bool = True) -> None:
        """A version's download ended: when `complete`, keep only the buffers its files used
        (the model's files changed); after a failed one, keep them all for the next version."""
        with self._lock:
            if complete:
                self._held = {key: self._held[key] for key in self._used if key in self._held}
            self._used = set()

    @property
    def held_bytes(self) -> int:
        return sum(size for _, size in self._held)
