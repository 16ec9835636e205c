"""The trainer's side of the checkpoint store: what a weight version holds and how a restart resumes.

Every published version holds the weights in HF layout, in the dtype explorers roll out with
(bf16 on a GPU: half the bytes of the trainer's float32 master copy). Every
`trainer.save_interval` steps, in the final step's version and in one a stop publishes, it also
holds the training state under `trainer_state/`: AdamW moments, LR schedule and step, plus the
float32 master weights when the published ones are rounded. A restart from such a version
continues the same optimisation exactly. Every version also holds the sampler's state
(`trainer_state/sampler.json`: replay use counts, offsets settled past the resume point,
counters), so a restarted trainer's batches continue too. Explorers never download
`trainer_state/`.

It works through the `TrainerEngine` protocol only, so every engine checkpoints alike; a sharded
engine hands it consolidated weights and state, written here once.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from rft.engines.trainer import TrainerEngine
from rft.engines.weights import read_safetensors_dir
from rft.storage.checkpoint_manifest import MANIFEST_NAME, CheckpointManifest
from rft.storage.checkpoint_store import (
    BASE_VERSION,
    TRAINER_STATE_DIR,
    CheckpointStore,
    OffsetLike,
)

log = logging.getLogger(__name__)

_OPTIMIZER_FILE = TRAINER_STATE_DIR + "optimizer.pt"
_MASTER_DIR = TRAINER_STATE_DIR + "master"  # an HF-style weights directory
_SAMPLER_FILE = TRAINER_STATE_DIR + "sampler.json"


def writer_identity() -> str:
    """`host:pid` of this process, kept in each manifest it commits (extra `writer`), so an
    operator (and the fencing test) can tell which of two trainers wrote a version."""
    return f"{socket.gethostname()}:{os.getpid()}"


class TrainerCheckpointer:
    """Writes weight versions (with training state when due) and restores a restarted trainer.

    `weights_dtype`: the dtype of the published weights; None keeps the trainer's own.
    """

    def __init__(
        self,
        store: CheckpointStore,
        save_interval: int,
        weights_dtype: torch.dtype | None = None,
    ) -> None:
        self.store = store
        self.save_interval = save_interval
        self.weights_dtype = weights_dtype
        self._state_saved_at = 0  # train step of the newest version that carries training state

    def write(
        self,
        engine: TrainerEngine,
        step: int,
        parent: int,
        offsets: Iterable[OffsetLike],
        *,
        final: bool,
        sampler_state: Mapping[str, Any] | None = None,
        before_commit: Callable[[CheckpointManifest], None] | None = None,
    ) -> CheckpointManifest:
        """Write version `step`; training state rides along when due or when `final`, the
        sampler's state (JSON) always when given. `before_commit`: see `CheckpointStore.write`."""
        with_state = final or step - self._state_saved_at >= self.save_interval
        rounded = self.weights_dtype is not None and self.weights_dtype != engine.dtype
        extra: dict[str, str] = {"writer": writer_identity()}
        tmp = Path(tempfile.mkdtemp(prefix="rft-ckpt-"))
        try:
            engine.save_hf(tmp, dtype=self.weights_dtype)
            if sampler_state is not None:
                (tmp / TRAINER_STATE_DIR).mkdir(exist_ok=True)
                (tmp / _SAMPLER_FILE).write_text(json.dumps(sampler_state, sort_keys=True))
                extra["sampler_state"] = _SAMPLER_FILE
            if with_state:
                (tmp / TRAINER_STATE_DIR).mkdir(exist_ok=True)
                engine.save_optimizer(tmp / _OPTIMIZER_FILE)
                extra["trainer_state"] = _OPTIMIZER_FILE
                if rounded:
                    (tmp / _MASTER_DIR).mkdir()
                    engine.save_weights(tmp / _MASTER_DIR / "model.safetensors")
                    extra["master_weights"] = _MASTER_DIR
            manifest = self.store.write(
                step,
                step,
                tmp,
                consumed_offsets=offsets,
                parent_version=parent,
                extra=extra,
                before_commit=before_commit,
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if with_state:
            self._state_saved_at = step
        return manifest

    def restore(self, engine: TrainerEngine) -> tuple[int, dict[tuple[str, int], int]]:
        """Load the newest version into `engine`: (train step, consumed offsets per partition).

        Returns (0, {}) when there is no checkpoint. The engine's reference model is left alone:
        a KL term keeps measuring against the base model across restarts.
        """
        version = self.store.latest_version()
        if version == BASE_VERSION:
            return 0, {}
        with tempfile.TemporaryDirectory(prefix="rft-resume-") as tmp:
            path = self.store.download(version, Path(tmp) / "ckpt")
            # the verified copy `download` placed beside the files: no second fetch
            manifest_file = path / MANIFEST_NAME
            manifest = CheckpointManifest.from_json(
                manifest_file.read_bytes(), source=str(manifest_file)
            )
            extra = manifest.extra
            if extra.get("master_weights"):
                engine.load_weights(read_safetensors_dir(path / extra["master_weights"]))
            else:
                self._load_published_weights(engine, path, version)
            if extra.get("trainer_state"):
                engine.load_optimizer(path / str(extra["trainer_state"]))
                how = "weights and optimizer state"
            else:
                # the moments are gone; at least the LR schedule continues where it was
                engine.skip_to_step(manifest.train_step)
                how = "weights only"
                log.warning(
                    "checkpoint v%d has no training state (trainer.save_interval is %d): "
                    "AdamW moments restart from zero",
                    version,
                    self.save_interval,
                )
        self._state_saved_at = manifest.train_step if extra.get("trainer_state") else 0
        offsets = {(o.topic, o.partition): o.offset for o in manifest.consumed_offsets}
        log.info(
            "resumed from checkpoint v%d (train step %d, %s), reading experiences from %s",
            version,
            manifest.train_step,
            how,
            offsets,
        )
        return manifest.train_step, offsets

    def read_sampler_state(self, version: int) -> dict[str, Any] | None:
        """The sampler state saved with `version` (sha256-verified), or None if it has none."""
        if version == BASE_VERSION:
            return None
        manifest = self.store.read_manifest(version)
        name = manifest.extra.get("sampler_state")
        if not name:
            return None
        with tempfile.TemporaryDirectory(prefix="rft-sampler-") as tmp:
            path = self.store.download(
                version,
                Path(tmp) / "state",
                skip_prefixes=tuple(f.name for f in manifest.files if f.name != name),
            )
            state: dict[str, Any] = json.loads((path / name).read_text())
        return state

    @staticmethod
    def _load_published_weights(engine: TrainerEngine, path: Path, version: int) -> None:
        tensors = read_safetensors_dir(path)
        stored = {t.dtype for t in tensors.values()}
        if any(d.itemsize < engine.dtype.itemsize for d in stored):
            log.warning(
                "checkpoint v%d holds %s weights and no master copy: training continues from "
                "the rounded weights",
                version,
                ", ".join(sorted(str(d).removeprefix("torch.") for d in stored)),
            )
        engine.load_weights(tensors)
