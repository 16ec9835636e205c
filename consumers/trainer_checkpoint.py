"""The trainer's side of the checkpoint store: what a weight version holds and how a restart resumes.

Every published version holds the weights (HF layout, what explorers load). Every
`trainer.save_interval` steps, and always at the trainer's last version, it also holds the training
state (AdamW moments, LR schedule, step) under `trainer_state/`, so a restart continues the same
optimisation rather than restarting the moments. Explorers never download `trainer_state/`.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from rft.engines.trainer import TorchTrainerEngine
from rft.storage.checkpoint_manifest import CheckpointManifest
from rft.storage.checkpoint_store import (
    BASE_VERSION,
    TRAINER_STATE_DIR,
    CheckpointStore,
    OffsetLike,
)

log = logging.getLogger(__name__)

_OPTIMIZER_FILE = TRAINER_STATE_DIR + "optimizer.pt"


class TrainerCheckpointer:
    """Writes weight versions (with training state when due) and restores a restarted trainer."""

    def __init__(self, store: CheckpointStore, save_interval: int) -> None:
        self.store = store
        self.save_interval = save_interval
        self._state_saved_at = 0  # train step of the newest version that carries training state

    def write(
        self,
        engine: TorchTrainerEngine,
        step: int,
        parent: int,
        offsets: Iterable[OffsetLike],
        *,
        final: bool,
    ) -> CheckpointManifest:
        """Write version `step`; training state rides along when due or when `final`."""
        with_state = final or step - self._state_saved_at >= self.save_interval
        tmp = Path(tempfile.mkdtemp(prefix="rft-ckpt-"))
        try:
            engine.save_hf(tmp)
            if with_state:
                (tmp / TRAINER_STATE_DIR).mkdir()
                engine.save_optimizer(tmp / _OPTIMIZER_FILE)
            manifest = self.store.write(
                step,
                step,
                tmp,
                consumed_offsets=offsets,
                parent_version=parent,
                extra={"trainer_state": _OPTIMIZER_FILE} if with_state else None,
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if with_state:
            self._state_saved_at = step
        return manifest

    def restore(self, engine: TorchTrainerEngine) -> tuple[int, dict[tuple[str, int], int]]:
        """Load the newest version into `engine`: (train step, consumed offsets per partition).

        Returns (0, {}) when there is no checkpoint. The engine's reference model is left alone:
        a KL term keeps measuring against the base model across restarts.
        """
        version = self.store.latest_version()
        if version == BASE_VERSION:
            return 0, {}
        manifest = self.store.read_manifest(version)
        with tempfile.TemporaryDirectory(prefix="rft-resume-") as tmp:
            path = self.store.download(version, Path(tmp) / "ckpt")
            engine.load_hf_weights(path)
            if manifest.extra.get("trainer_state"):
                engine.load_optimizer(path / str(manifest.extra["trainer_state"]))
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
        self._state_saved_at = manifest.train_step if how != "weights only" else 0
        offsets = {(o.topic, o.partition): o.offset for o in manifest.consumed_offsets}
        log.info(
            "resumed from checkpoint v%d (train step %d, %s), reading experiences from %s",
            version,
            manifest.train_step,
            how,
            offsets,
        )
        return manifest.train_step, offsets
