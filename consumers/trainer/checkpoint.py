"""The trainer's side of the checkpoint store: what a weight version holds and how a restart resumes.

Every published version holds the weights in HF layout, in the dtype explorers roll out with
(bf16 on a GPU: half the bytes of the trainer's float32 master copy), streamed from the
engine's tensors to the store (no local file; sha256 taken as they go; past 128 MiB cut into
HF shards that move and hash several at once), and the sampler's state
(`trainer_state/sampler.json`: replay use counts, offsets settled past the resume point,
counters), so a restarted trainer's batches continue too. Its manifest is created, and the
version announced, as soon as these are durable. With a weight-sync group (`sync_method: nccl` or
`memory`) the weights are sent to its explorers first, and the manifest keeps the token they came
with (`fast_sync_token`): an explorer commits what it sampled with them only once it finds that
manifest (docs/weight-sync.md).

Every `trainer.save_interval` steps, in the final step's version and in one a stop publishes, the
version also gets the training state: AdamW moments, LR schedule and step, plus the float32
master weights when the published ones are rounded. It is copied to the CPU before the manifest
(the next step changes it; rft.engines.state_snapshot) and written in the background as files
that stream from that copy (rft.engines.state_files), after the announcement, as the version's part `trainer_state`
(rft.storage.checkpoint_store.write_part: files, then a listing created if absent), on a thread
of its own: the versions after it are uploaded, committed and announced meanwhile (its files
pausing while theirs go up: rft.storage.upload_priority), and retention spares its version until
its listing exists. At most one is in flight: the next version that
carries a state, and the end of the run, wait for it; a failure surfaces at the first version
begun after it ends. A restart from a version whose part is complete
continues the same optimisation exactly; from one whose part never completed (the trainer died
in the seconds it was being written) it resumes the weights, the log position and the LR
schedule, with fresh AdamW moments, and says so. Explorers never read `trainer_state/` nor the
part.

A critic trained beside the policy (PPO) is saved with it: its weights in every version
(`trainer_state/critic/`, float32, never read by explorers), its AdamW state with the training
state; a resume restores both, as it does the policy's.

It works through the `TrainerEngine` protocol only, so every engine checkpoints alike; a sharded
engine hands it consolidated weights and state, written here once. An engine that trains a LoRA
adapter (`model.lora_configs`) hands it the adapter: the version's weights file is then peft's
`adapter_model.safetensors`, and the manifest carries what the engine's `version_extra` says (an
adapter, on which base). A restart loads a version only into an engine of the same form.
"""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rft.engines.critic import Critic
from rft.engines.state_files import state_from_files, state_payloads
from rft.engines.trainer import TrainerEngine
from rft.engines.weights import (
    ADAPTER_SAFETENSORS,
    SAFETENSORS,
    SHARD_BYTES,
    SafetensorsPayload,
    safetensors_payloads,
    tensors_of_files,
)
from rft.errors import CheckpointError, EngineError
from rft.fault_points import fault_point
from rft.storage.checkpoint_manifest import CheckpointManifest
from rft.storage.checkpoint_store import (
    BASE_VERSION,
    TRAINER_STATE_DIR,
    CheckpointStore,
    OffsetLike,
    StagedVersion,
)
from rft.storage.payload import BytesPayload, Payload
from rft.storage.upload_priority import UploadPriority
from rft.synchronizer.fast_path import FAST_TOKEN, new_token
from rft.synchronizer.weight_group import WeightGroupHost
from rft.tracing.otel import Context, trace
from rft.tracing.spans import UPLOAD

log = logging.getLogger(__name__)
tracer = trace.get_tracer("rft.trainer")

# the optimizer states' directories (rft.engines.state_files: skeleton.pt and safetensors shards);
# versions written before held one torch.save file each (optimizer.pt, critic_optimizer.pt)
_OPTIMIZER_DIR = TRAINER_STATE_DIR + "optimizer"
_MASTER_DIR = TRAINER_STATE_DIR + "master"  # an HF-style weights directory
_SAMPLER_FILE = TRAINER_STATE_DIR + "sampler.json"
# a critic's weights (every version, in the master dtype) and AdamW state (with the training state)
_CRITIC_DIR = TRAINER_STATE_DIR + "critic"
_CRITIC_OPTIMIZER_DIR = TRAINER_STATE_DIR + "critic_optimizer"
#: The part of a version that holds its training state, written after the version.
STATE_PART = "trainer_state"
_SAFETENSORS_METADATA = {"format": "pt"}


def critic_of(engine: TrainerEngine) -> Critic | None:
    """The critic an engine trains beside its policy, if any (engines without one have none)."""
    critic: Critic | None = getattr(engine, "critic", None)
    return critic


def _check_form(engine: TrainerEngine, manifest: CheckpointManifest, source: str) -> None:
    """CheckpointError unless the version's weights are of the form this engine trains (full
    weights, or an adapter of the same kind on the same base)."""
    own = engine.version_extra()
    keys = set(own) | {k for k in manifest.extra if k.startswith("adapter")}
    differ = sorted(k for k in keys if str(manifest.extra.get(k, "")) != own.get(k, ""))
    if differ:
        theirs = {k: manifest.extra.get(k, "") for k in differ}
        mine = {k: own.get(k, "") for k in differ}
        raise CheckpointError(
            f"{source}: this version's weights are {theirs or 'full weights'}, but this trainer "
            f"trains {mine} (model.lora_configs or the base model changed since it was written); "
            "start a new run, or set continue_from_checkpoint: false"
        )


class _TorchObject:
    """A training state taken at a version (CPU tensors of its own), made into files only when
    its part is written, on the background thread: its tensors stream from their own memory
    (rft.engines.state_files), so no serialized copy of it is built on the host."""

    def __init__(self, state: Mapping[str, Any], shard_bytes: int) -> None:
        self.state = state
        self.shard_bytes = shard_bytes

    def payloads(self, directory: str) -> dict[str, Payload]:
        files = state_payloads(self.state, self.shard_bytes)
        return {f"{directory}/{name}": payload for name, payload in files.items()}


@dataclass
class _Pending:
    """A version begun and not landed: its upload in the background, and the training state
    taken with it (written once the version is committed)."""

    step: int
    upload: Future[StagedVersion]
    state: tuple[dict[str, Payload | _TorchObject], dict[str, str]] | None


def writer_identity() -> str:
    """`host:pid` of this process, kept in each manifest it commits (extra `writer`), so an
    operator (and the fencing test) can tell which of two trainers wrote a version."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _training_state(
    files: Mapping[str, memoryview], name: str, source: str
) -> tuple[dict[str, Any], str]:
    """The training state stored under `name` among a version's state files, and where it came
    from: a directory of rft.engines.state_files, or (versions written before) one torch.save
    file."""
    if name in files:
        try:
            state = torch.load(io.BytesIO(files[name]), map_location="cpu", weights_only=True)
        except (RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as exc:
            raise CheckpointError(f"{source}{name}: unreadable training state: {exc}") from exc
        return state, f"{source}{name}"
    prefix = f"{name}/"
    own = {k[len(prefix) :]: v for k, v in files.items() if k.startswith(prefix)}
    try:
        return state_from_files(own, f"{source}{prefix}"), f"{source}{prefix}"
    except EngineError as exc:
        raise CheckpointError(str(exc)) from exc


class TrainerCheckpointer:
    """Writes weight versions (training state in the background when due) and restores a
    restarted trainer.

    `weights_dtype`: the dtype of the published weights; None keeps the trainer's own.
    """

    def __init__(
        self,
        store: CheckpointStore,
        save_interval: int,
        weights_dtype: torch.dtype | None = None,
        fast: WeightGroupHost | None = None,
        shard_bytes: int = SHARD_BYTES,
    ) -> None:
        self.store = store
        self.save_interval = save_interval
        self.weights_dtype = weights_dtype
        # weights past twice this go up as HF shards, moved and hashed several at once
        self.shard_bytes = shard_bytes
        # the weight-sync group (sync_method: nccl, memory): each version goes to it first
        self.fast = fast
        self._token: tuple[int, int] | None = None  # (version, its token) sent last
        self._state_saved_at = 0  # train step of the newest version that carries training state
        # one thread for the versions' uploads, in order; a training state (at 1.5B about 18 GB
        # serialized, hashed and written: tens of seconds) on a thread of its own, so the
        # versions after it land meanwhile; retention on a third, so that deleting an old
        # version never stands in front of the next one's upload
        self._background = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-writer")
        self._state_writer = ThreadPoolExecutor(1, thread_name_prefix="state-writer")
        self._retention = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-retention")
        self._state_write: tuple[int, Future[CheckpointManifest]] | None = None
        # the state's files pause while a version's weights go up: those are waited for
        self.priority = UploadPriority()
        self._pending: _Pending | None = None  # begun, not landed
        self._files_of: tuple[TrainerEngine, dict[str, Payload]] | None = None  # _model_files

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
        """Write version `step` (weights and sampler state: `before_commit` as in
        `CheckpointStore.write`) and return its manifest once it is committed: `begin`, then
        `land`. The training state, when due or `final`, follows in the background
        (`wait_for_state`)."""
        self.begin(engine, step, parent, offsets, final=final, sampler_state=sampler_state)
        return self.land(before_commit)

    def begin(
        self,
        engine: TrainerEngine,
        step: int,
        parent: int,
        offsets: Iterable[OffsetLike],
        *,
        final: bool,
        sampler_state: Mapping[str, Any] | None = None,
        trace_context: Context | None = None,
    ) -> None:
        """Start writing version `step`: what it holds is taken from the engine here, as copies
        of their own, and sent to the weight-sync group; its files go up in the background,
        while the trainer may go on training. `land` commits it. One version at a time."""
        if self._pending is not None:
            raise CheckpointError(
                f"checkpoint v{step} begun while v{self._pending.step} is not landed "
                "(versions are committed in order)"
            )
        started = time.monotonic()
        due = final or step - self._state_saved_at >= self.save_interval
        writing = self._state_write is not None and not self._state_write[1].done()
        # one training state in host memory at a time: a due one while the last is still going
        # up goes with the first version after it (at 1.5B a state took 42 s to write, and
        # waiting for it held the trainer 12 s); the last version's state is always waited for
        with_state = due and (final or not writing)
        if due and not with_state and self._state_write is not None:
            log.info(
                "version %d: its training state is due, deferred while v%d's still goes up",
                step,
                self._state_write[0],
            )
        if with_state or self._state_done():
            # a failed write surfaces here
            self.wait_for_state()
        form = engine.version_extra()
        extra: dict[str, str] = {"writer": writer_identity(), **form}
        weights = engine.export_weights(self.weights_dtype, owned=True)
        if self.fast is not None:
            extra[FAST_TOKEN] = str(self._send_fast(step, weights))
        payloads: dict[str, Payload] = (
            {ADAPTER_SAFETENSORS: SafetensorsPayload(weights, _SAFETENSORS_METADATA)}
            if form  # an adapter: megabytes, one file
            else dict(safetensors_payloads(weights, _SAFETENSORS_METADATA, self.shard_bytes))
        )
        critic = critic_of(engine)
        if critic is not None:
            # every version: a resume from any version continues with the critic it trained
            # with, and the version's fenced manifest commits both together
            payloads[f"{_CRITIC_DIR}/{SAFETENSORS}"] = SafetensorsPayload(
                critic.state_dict(), _SAFETENSORS_METADATA
            )
            extra["critic_weights"] = _CRITIC_DIR
        if sampler_state is not None:
            payloads[_SAMPLER_FILE] = BytesPayload(
                json.dumps(sampler_state, sort_keys=True).encode()
            )
            extra["sampler_state"] = _SAMPLER_FILE
        state = self._snapshot(engine) if with_state else None
        if state is not None:
            extra["trainer_state_part"] = STATE_PART
        payloads.update(self._model_files(engine))
        upload = self._background.submit(
            self._upload, step, tuple(offsets), parent, extra, payloads, trace_context
        )
        self._pending = _Pending(step, upload, state)
        log.info(
            "version %d taken in %.2fs (weights%s); its files go up in the background",
            step,
            time.monotonic() - started,
            " and training state" if state is not None else "",
        )

    @property
    def pending(self) -> int | None:
        """The version begun and not yet landed, if any."""
        return None if self._pending is None else self._pending.step

    def uploaded(self) -> bool:
        """Whether the pending version's files are all up (or their upload failed): `land`
        would not wait."""
        return self._pending is not None and self._pending.upload.done()

    def land(
        self, before_commit: Callable[[CheckpointManifest], None] | None = None
    ) -> CheckpointManifest:
        """Commit the pending version once its files are up (`before_commit` as in
        `CheckpointStore.write`), on the calling thread, and return its manifest; its training
        state then goes up in the background. If the commit fails the version stays pending,
        and landing it again commits the same files (the engine has moved on since `begin`);
        if the upload failed, the version is dropped and its error raised."""
        pending = self._pending
        if pending is None:
            raise CheckpointError("no checkpoint version is pending")
        try:
            staged = pending.upload.result()
        except BaseException:
            self._pending = None
            raise
        manifest = self.store.commit(staged, before_commit)
        self._pending = None
        if pending.state is not None:
            files, state_extra = pending.state
            future = self._state_writer.submit(self._write_state, pending.step, files, state_extra)
            self._state_write = (pending.step, future)
            self._state_saved_at = pending.step
        return manifest

    def prune_behind(
        self, keep_last: int, in_use: Callable[[], Collection[int] | None] | None
    ) -> None:
        """Retention (`CheckpointStore.prune`) on a thread of its own, off the trainer's path
        and off the versions' uploads. Deleting a 1.5B-parameter version's files took 2 s of
        the trainer's path on an H100 machine. Queued on the upload thread instead, it took 7 s
        when a training state was going up beside it or was among the files deleted (two H200s,
        2026-11-28), and the next version's weights waited for it. Deletions do not wait for
        the weights: on this CPU the weights went up no slower beside them
        (bench/upload_beside_retention.py). The version whose training state is still going up
        is spared with those `in_use` names. A failure is logged: retention
        only frees space (`rft gc` does it too)."""

        def spared() -> Collection[int] | None:
            held = set() if in_use is None else in_use()
            writing = self._state_write
            if held is None or writing is None or writing[1].done():
                return held
            return {*held, writing[0]}  # its state's listing is still to be written

        def prune() -> None:
            try:
                self.store.prune(keep_last, spared)
            except Exception as exc:  # noqa: BLE001 - retention is best effort; the run goes on
                log.warning("retention (trainer.max_checkpoints_to_keep) failed: %s", exc)

        self._retention.submit(prune)

    def forget_pending(self) -> None:
        """Drop the pending version: its manifest exists already (a commit whose response was
        lost), so there is nothing left to land."""
        self._pending = None

    def _model_files(self, engine: TrainerEngine) -> dict[str, Payload]:
        """The files every version of `engine` carries beside its weights (config, generation
        config, tokenizer; an adapter's config), written by the engine once and kept: they do
        not change between versions, and writing them cost a SmolLM2 trainer 0.06 s of each
        version's path (the tokenizer's 3.5 MB JSON)."""
        if self._files_of is not None and self._files_of[0] is engine:
            return dict(self._files_of[1])
        tmp = Path(tempfile.mkdtemp(prefix="rft-ckpt-"))
        try:
            engine.save_hf(tmp, dtype=self.weights_dtype, weights=False)
            files: dict[str, Payload] = {
                path.relative_to(tmp).as_posix(): BytesPayload(path.read_bytes())
                for path in sorted(tmp.rglob("*"))
                if path.is_file()
            }
        except OSError as exc:
            raise CheckpointError(f"{tmp}: cannot read the model's files back: {exc}") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self._files_of = (engine, files)
        return dict(files)

    def _upload(
        self,
        step: int,
        offsets: tuple[OffsetLike, ...],
        parent: int,
        extra: Mapping[str, str],
        payloads: Mapping[str, Payload],
        trace_context: Context | None,
    ) -> StagedVersion:
        """Version `step`'s files up, on the background thread, in a span of the version's."""
        with tracer.start_as_current_span(UPLOAD, context=trace_context) as span:
            fault_point("checkpoint.upload")
            with self.priority.urgent():
                staged = self.store.upload(
                    step, step, None, offsets, parent, extra, payloads=payloads
                )
            span.set_attributes(
                {
                    "rft.version": step,
                    "rft.uri": self.store.uri(step),
                    "rft.files": len(staged.manifest.files),
                    "rft.bytes": staged.manifest.total_size,
                    "rft.with_trainer_state": "trainer_state_part" in extra,
                }
            )
            return staged

    def _send_fast(self, step: int, weights: dict[str, torch.Tensor]) -> int:
        """Send version `step` to the weight-sync group; its token. A version written
        again (its announcement failed) keeps its token: the weights are the same."""
        assert self.fast is not None
        if self._token is None or self._token[0] != step:
            self._token = (step, new_token())
        started = time.monotonic()
        reached = self.fast.send(step, self._token[1], weights)
        log.info(
            "version %d sent over the weight-sync group to %d explorers in %.2fs",
            step,
            len(reached),
            time.monotonic() - started,
        )
        return self._token[1]

    def _write_state(
        self, step: int, files: Mapping[str, Payload | _TorchObject], extra: Mapping[str, str]
    ) -> CheckpointManifest:
        """Version `step`'s part `trainer_state`, on the background thread: the optimizer
        states become files here (streamed from their copy), off the step's path."""
        payloads: dict[str, Payload] = {}
        for name, item in files.items():
            payloads.update(item.payloads(name) if isinstance(item, _TorchObject) else {name: item})
        deferred = {name: self.priority.deferrable(p) for name, p in payloads.items()}
        started, paused = time.monotonic(), self.priority.waited_s
        listing = self.store.write_part(step, STATE_PART, deferred, extra)
        log.info(
            "training state of v%d written in %.1fs; its files waited %.1fs (summed over threads) "
            "for versions' weights going up",
            step,
            time.monotonic() - started,
            self.priority.waited_s - paused,
        )
        return listing

    def _snapshot(
        self, engine: TrainerEngine
    ) -> tuple[dict[str, Payload | _TorchObject], dict[str, str]]:
        """The training state as it is now, copied to the CPU (the next step changes the
        engine's): the optimizers' states, made into files later in the background, and the float32
        master weights when the published ones are rounded."""
        files: dict[str, Payload | _TorchObject] = {
            _OPTIMIZER_DIR: _TorchObject(engine.training_state(), self.shard_bytes)
        }
        extra = {"trainer_state": _OPTIMIZER_DIR}
        critic = critic_of(engine)
        if critic is not None:
            files[_CRITIC_OPTIMIZER_DIR] = _TorchObject(critic.training_state(), self.shard_bytes)
            extra["critic_state"] = _CRITIC_OPTIMIZER_DIR
        if self._carries_master(engine):
            master = safetensors_payloads(
                engine.export_weights(owned=True), _SAFETENSORS_METADATA, self.shard_bytes
            )
            files.update({f"{_MASTER_DIR}/{name}": payload for name, payload in master.items()})
            extra["master_weights"] = _MASTER_DIR
        return files, extra

    def reserve_host_memory(self, engine: TrainerEngine) -> None:
        """Have `engine` set aside, in the background, the host memory a version's copies will
        take (`TrainerEngine.reserve_version_copies`): every run writes at least its last
        version's training state, and the first copies' allocation would otherwise fall on the
        step's path (at the 1.5B shape 1.5 s for the first version's weights, 10 s for the first
        training state)."""
        engine.reserve_version_copies(self.weights_dtype, self._carries_master(engine))
        critic = critic_of(engine)
        if critic is not None:
            critic.reserve_state_copies()

    def _carries_master(self, engine: TrainerEngine) -> bool:
        """Whether a version's training state carries float32 master weights: the published
        weights are rounded to another dtype."""
        return self.weights_dtype is not None and self.weights_dtype != engine.dtype

    def _state_done(self) -> bool:
        """Whether a training state went up (or failed) and was not yet waited for."""
        return self._state_write is not None and self._state_write[1].done()

    def wait_for_state(self) -> None:
        """Until the training state written in the background is durable; raises what its
        write raised (the trainer must not go on as if its state were saved)."""
        if self._state_write is None:
            return
        step, future = self._state_write
        try:
            future.result()
        finally:
            self._state_write = None
        log.info("training state of v%d is durable", step)

    def close(self) -> None:
        """Wait for a training state still being written, then stop the background threads.
        A failure is logged, not raised: this runs while the trainer shuts down. A version
        begun and not landed is left uncommitted (its files are invisible without a manifest,
        and retention removes them)."""
        if self._pending is not None:
            log.warning(
                "checkpoint v%d was not committed before the trainer stopped: a restart "
                "resumes from the version before it",
                self._pending.step,
            )
            self._pending.upload.cancel()  # if it has not started; its files are void anyway
            self._pending = None
        try:
            self.wait_for_state()
        except Exception as exc:  # noqa: BLE001 - shutting down; the next resume says it too
            log.error("the training state written in the background failed: %s", exc)
        self._state_writer.shutdown(wait=True)
        self._background.shutdown(wait=True)
        self._retention.shutdown(wait=True)  # a prune asked for after the last version too
        if self.fast is not None:
            self.fast.close()

    def restore(self, engine: TrainerEngine) -> tuple[int, dict[tuple[str, int], int]]:
        """Load the newest version into `engine`: (train step, consumed offsets per partition).

        Returns (0, {}) when there is no checkpoint. The engine's reference model is left alone:
        a KL term keeps measuring against the base model across restarts.
        """
        version = self.store.latest_version()
        if version == BASE_VERSION:
            return 0, {}
        manifest, files = self.store.read_files(version)
        source = self.store.uri(version)
        _check_form(engine, manifest, source)
        # versions written before the state became a part of its own list its files inline
        state_files, state = files, manifest.extra
        part = manifest.extra.get("trainer_state_part")
        if part:
            found = self.store.read_part(version, str(part))
            if found is None:
                state = {}
                log.warning(
                    "checkpoint v%d's training state was still being written when its trainer "
                    "stopped: it resumes without it",
                    version,
                )
            else:
                state, state_files = found[0].extra, found[1]
        if state.get("master_weights"):
            prefix = f"{state['master_weights']}/"
            engine.load_weights(
                tensors_of_files(
                    {k[len(prefix) :]: v for k, v in state_files.items() if k.startswith(prefix)},
                    f"{source}{prefix}",
                )
            )
        else:
            self._load_published_weights(engine, files, version, source)
        if state.get("trainer_state"):
            engine.restore_training_state(
                *_training_state(state_files, str(state["trainer_state"]), source)
            )
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
        self._restore_critic(engine, version, manifest.extra, files, state, state_files, source)
        self._state_saved_at = manifest.train_step if state.get("trainer_state") else 0
        offsets = {(o.topic, o.partition): o.offset for o in manifest.consumed_offsets}
        log.info(
            "resumed from checkpoint v%d (train step %d, %s), reading experiences from %s",
            version,
            manifest.train_step,
            how,
            offsets,
        )
        return manifest.train_step, offsets

    @staticmethod
    def _restore_critic(
        engine: TrainerEngine,
        version: int,
        extra: Mapping[str, Any],
        files: Mapping[str, memoryview],
        state: Mapping[str, Any],
        state_files: Mapping[str, memoryview],
        source: str,
    ) -> None:
        """The critic's weights from the version and its AdamW state from the training state."""
        critic = critic_of(engine)
        if critic is None:
            return
        if not extra.get("critic_weights"):
            log.warning(
                "checkpoint v%d holds no critic (its run trained none): the critic starts "
                "from critic_model_path with a fresh value head",
                version,
            )
            return
        prefix = f"{extra['critic_weights']}/"
        critic.load_state_dict(
            tensors_of_files(
                {k[len(prefix) :]: v for k, v in files.items() if k.startswith(prefix)},
                f"{source}{prefix}",
            )
        )
        if state.get("critic_state"):
            critic.restore_training_state(
                *_training_state(state_files, str(state["critic_state"]), source)
            )
        else:
            log.warning(
                "checkpoint v%d has no critic optimizer state: the critic's AdamW moments "
                "restart from zero",
                version,
            )

    def read_sampler_state(self, version: int) -> dict[str, Any] | None:
        """The sampler state saved with `version` (sha256-verified), or None if it has none."""
        if version == BASE_VERSION:
            return None
        manifest = self.store.read_manifest(version)
        name = manifest.extra.get("sampler_state")
        if not name:
            return None
        others = tuple(f.name for f in manifest.files if f.name != name)
        _, files = self.store.read_files(version, skip_prefixes=others)
        state: dict[str, Any] = json.loads(bytes(files[name]))
        return state

    @staticmethod
    def _load_published_weights(
        engine: TrainerEngine, files: Mapping[str, memoryview], version: int, source: str
    ) -> None:
        tensors = tensors_of_files(files, source)
        stored = {t.dtype for t in tensors.values()}
        if any(d.itemsize < engine.dtype.itemsize for d in stored):
            log.warning(
                "checkpoint v%d holds %s weights and no master copy: training continues from "
                "the rounded weights",
                version,
                ", ".join(sorted(str(d).removeprefix("torch.") for d in stored)),
            )
        engine.load_weights(tensors)
