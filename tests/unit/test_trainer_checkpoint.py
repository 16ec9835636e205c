"""Trainer checkpoints: a restart with training state continues the same optimisation exactly (also
when versions are published in bf16: the float32 master copy rides along); one without it keeps
the weights and the LR schedule but restarts AdamW; the KL reference stays the base model;
explorers' downloads leave the training state out. The training state is a part of the version
written in the background: a restart from a version whose part never completed resumes without
it and says so, and a failure of the background write surfaces at the next write. A version's
files go up in the background too (`begin`, then `land`): what it holds is the engine's state at
`begin`, however far training has gone when it lands, and a commit that failed lands again from
the same files. A training state going up waits while a later version's weights go up."""

from __future__ import annotations

import io
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import rft.consumers.trainer.checkpoint as checkpoint_module
from rft.consumers.trainer.checkpoint import STATE_PART, TrainerCheckpointer
from rft.engines.models import load_model
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine
from rft.engines.weights import tensors_of_files
from rft.errors import CheckpointError
from rft.storage import CheckpointStore, LocalObjectStore
from rft.storage.checkpoint_store import TRAINER_STATE_DIR
from rft.storage.payload import BytesPayload
from tests.unit.test_engines_trainer import _batch, maximise_logprob

CONFIG = TorchTrainerConfig(lr=5e-2, warmup_steps=3, micro_batch_size=2, use_ref_model=True)
OFFSETS = [("exp", 0, 17), ("exp", 1, 9)]


def engine() -> TorchTrainerEngine:
    model, tok = load_model("tiny")  # seeded: every call builds the same base model
    return TorchTrainerEngine(model, CONFIG, tokenizer=tok)


def train(e: TorchTrainerEngine, steps: range) -> None:
    for s in steps:
        e.train_step(_batch(4, seed=s), maximise_logprob)


def weights(e: TorchTrainerEngine) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in e.model.state_dict().items()}


def store(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(LocalObjectStore(tmp_path / "objects"), "proj", "run")


def _one_torch_save_file(self: Any, directory: str) -> dict[str, BytesPayload]:
    """How versions written before rft.engines.state_files hold an optimizer state."""
    buffer = io.BytesIO()
    torch.save(self.state, buffer)
    return {directory: BytesPayload(buffer.getvalue())}


@pytest.mark.parametrize("form", ["streamed-files", "one-torch-save-file"])
def test_restart_with_training_state_matches_an_uninterrupted_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    if form == "one-torch-save-file":  # an older version's state must still resume exactly
        monkeypatch.setattr(checkpoint_module._TorchObject, "payloads", _one_torch_save_file)
    straight = engine()
    train(straight, range(4))

    first = engine()
    train(first, range(2))
    writer = TrainerCheckpointer(store(tmp_path), save_interval=100)
    writer.write(first, 2, 0, OFFSETS, final=True)
    writer.close()  # the training state, written in the background, is durable
    part = store(tmp_path).read_part(2, STATE_PART)
    assert part is not None
    name = part[0].extra["trainer_state"]
    files = {k for k in part[1] if k.startswith(f"{name}/")}
    if form == "streamed-files":
        assert f"{name}/skeleton.pt" in files and any(k.endswith(".safetensors") for k in files)
    else:
        assert name in part[1] and not files

    resumed = engine()
    step, offsets = TrainerCheckpointer(store(tmp_path), save_interval=100).restore(resumed)
    assert (step, offsets) == (2, {("exp", 0): 17, ("exp", 1): 9})
    assert resumed.step == 2
    train(resumed, range(2, 4))

    expect, got = weights(straight), weights(resumed)
    assert all(torch.equal(expect[k], got[k]) for k in expect)
    assert resumed.scheduler.get_last_lr() == straight.scheduler.get_last_lr()


def test_the_state_written_is_the_versions_even_when_training_goes_on_first(
    tmp_path: Path,
) -> None:
    """The state is serialized on the background thread, after the step's path has moved on:
    what is written must be a copy taken at the version, not the engine's live moments."""
    straight = engine()
    train(straight, range(4))

    first = engine()
    train(first, range(2))
    writer = TrainerCheckpointer(store(tmp_path), save_interval=100)
    held = threading.Event()
    writer.begin(first, 2, 0, OFFSETS, final=True)  # the state is taken here
    writer._state_writer.submit(held.wait, 30)  # the state's write queues behind this
    writer.land()
    train(first, range(2, 5))  # AdamW's moments and step change in place meanwhile
    held.set()
    writer.close()

    resumed = engine()
    TrainerCheckpointer(store(tmp_path), save_interval=100).restore(resumed)
    assert resumed.step == 2
    train(resumed, range(2, 4))
    expect, got = weights(straight), weights(resumed)
    assert all(torch.equal(expect[k], got[k]) for k in expect)


def test_versions_land_while_a_training_state_goes_up_and_retention_spares_its_version(
    tmp_path: Path,
) -> None:
    """A training state goes up on a thread of its own: the weights-only versions after it are
    committed meanwhile (at 1.5B the state took tens of seconds, and the next version waited for
    it), and retention keeps the version until its state's listing exists."""
    checkpoints = store(tmp_path)
    e = engine()
    train(e, range(1))
    writer = TrainerCheckpointer(checkpoints, save_interval=100)
    held = threading.Event()
    writer._state_writer.submit(held.wait, 30)  # v1's state queues behind this
    writer.write(e, 1, 0, OFFSETS, final=True)
    for step in (2, 3):
        train(e, range(step - 1, step))
        writer.write(e, step, step - 1, OFFSETS, final=False)
    assert checkpoints.list_versions() == [1, 2, 3]
    assert checkpoints.read_part(1, STATE_PART) is None  # still going up
    writer.prune_behind(1, None)
    writer._retention.submit(lambda: None).result()  # after the prune
    assert checkpoints.list_versions() == [1, 3]  # v1 spared, v2 pruned
    held.set()
    writer.wait_for_state()
    assert checkpoints.read_part(1, STATE_PART) is not None
    writer.prune_behind(1, None)
    writer.close()
    assert checkpoints.list_versions() == [3]


def test_a_version_holds_the_weights_it_began_with_while_training_goes_on(
    tmp_path: Path,
) -> None:
    """The upload runs on the background thread while the trainer trains the next steps: the
    weights it sends must be a copy taken at `begin` (the float32 engine's export would
    otherwise be its live parameters)."""
    first = engine()
    train(first, range(2))
    at_two = weights(first)
    writer = TrainerCheckpointer(store(tmp_path), save_interval=100)
    held = threading.Event()
    writer._background.submit(held.wait, 30)  # the upload queues behind this
    writer.begin(first, 2, 0, OFFSETS, final=False)
    assert writer.pending == 2 and not writer.uploaded()
    train(first, range(2, 5))  # the parameters change in place meanwhile
    assert not torch.equal(weights(first)["lm_head.weight"], at_two["lm_head.weight"])
    held.set()
    manifest = writer.land()
    writer.close()
    assert (manifest.version, writer.pending) == (2, None)

    resumed = engine()
    assert TrainerCheckpointer(store(tmp_path), save_interval=100).restore(resumed)[0] == 2
    got = weights(resumed)
    assert all(torch.equal(at_two[k], got[k]) for k in at_two)


def test_a_commit_that_failed_lands_again_from_the_same_files(tmp_path: Path) -> None:
    """`before_commit` failing (the announcement's transaction, in an outage) leaves the
    version pending; landing it again commits the files uploaded at `begin`, not the engine's
    weights of now, and versions land in order."""
    first = engine()
    train(first, range(2))
    at_two = weights(first)
    checkpoints = store(tmp_path)
    writer = TrainerCheckpointer(checkpoints, save_interval=100)
    writer.begin(first, 2, 0, OFFSETS, final=False)

    def outage(manifest: object) -> None:
        raise CheckpointError("the announcement failed")

    with pytest.raises(CheckpointError, match="announcement failed"):
        writer.land(before_commit=outage)
    assert writer.pending == 2 and not checkpoints.has_manifest(2)
    train(first, range(2, 4))
    with pytest.raises(CheckpointError, match="v2 is not landed"):
        writer.begin(first, 4, 2, OFFSETS, final=False)
    uploaded = [o.key for o in checkpoints.store.list(checkpoints.version_prefix(2))]
    writer.land()
    writer.write(first, 4, 2, OFFSETS, final=False)
    writer.close()
    # the second try uploaded nothing: the version's objects are those of the first
    listed = [o.key for o in checkpoints.store.list(checkpoints.version_prefix(2))]
    assert sorted(listed) == sorted([*uploaded, checkpoints.version_prefix(2) + "manifest.json"])
    _, files = checkpoints.read_files(2)
    got = tensors_of_files({"model.safetensors": files["model.safetensors"]}, "v2")
    assert all(torch.equal(at_two[k], got[k]) for k in got)
    assert checkpoints.latest_version() == 4


def test_version_without_training_state_restarts_adamw_but_not_the_schedule(
    tmp_path: Path, caplog
) -> None:
    straight = engine()
    train(straight, range(2))
    at_two_lr = straight.scheduler.get_last_lr()
    at_two = weights(straight)
    train(straight, range(2, 4))

    checkpointer = TrainerCheckpointer(store(tmp_path), save_interval=100)
    first = engine()
    train(first, range(2))
    manifest = checkpointer.write(first, 2, 0, OFFSETS, final=False)  # not due: weights only
    assert not any(f.name.startswith(TRAINER_STATE_DIR) for f in manifest.files)

    resumed = engine()
    with caplog.at_level(logging.WARNING):
        assert TrainerCheckpointer(store(tmp_path), save_interval=100).restore(resumed)[0] == 2
    assert "AdamW moments restart from zero" in caplog.text
    assert resumed.scheduler.get_last_lr() == at_two_lr
    assert all(torch.equal(at_two[k], v) for k, v in weights(resumed).items())
    train(resumed, range(2, 4))
    expect, got = weights(straight), weights(resumed)
    assert any(not torch.equal(expect[k], got[k]) for k in expect)


def test_training_state_rides_along_every_save_interval_steps(tmp_path: Path) -> None:
    checkpoints = store(tmp_path)
    checkpointer = TrainerCheckpointer(checkpoints, save_interval=3)
    e = engine()
    carried = {}
    for step in range(1, 8):
        train(e, range(step - 1, step))
        manifest = checkpointer.write(e, step, step - 1, OFFSETS, final=step == 7)
        checkpointer.wait_for_state()
        # the weights' manifest lists no training state: it is the version's part of its own
        assert not any(f.name.startswith(TRAINER_STATE_DIR + "optim") for f in manifest.files)
        carried[step] = checkpoints.read_part(step, STATE_PART) is not None
    assert [s for s, has in carried.items() if has] == [3, 6, 7]


def test_a_version_whose_training_state_never_completed_resumes_without_it(
    tmp_path: Path, caplog
) -> None:
    checkpoints = store(tmp_path)
    first = engine()
    train(first, range(2))
    writer = TrainerCheckpointer(checkpoints, save_interval=100)
    writer.write(first, 2, 0, OFFSETS, final=True)
    writer.close()
    # as if the trainer had died before the part's listing was created
    checkpoints.store.delete(checkpoints.part_key(2, STATE_PART))

    resumed = engine()
    with caplog.at_level(logging.WARNING):
        step, _ = TrainerCheckpointer(checkpoints, save_interval=100).restore(resumed)
    assert step == 2
    assert "training state was still being written" in caplog.text
    assert "AdamW moments restart from zero" in caplog.text
    assert all(torch.equal(weights(first)[k], v) for k, v in weights(resumed).items())


def test_a_failed_background_state_write_surfaces_at_the_next_write(tmp_path: Path) -> None:
    checkpoints = store(tmp_path)
    e = engine()
    train(e, range(1))
    writer = TrainerCheckpointer(checkpoints, save_interval=1)
    checkpoints.store.put_bytes(checkpoints.part_key(1, STATE_PART), b"{}")  # in the way
    writer.write(e, 1, 0, OFFSETS, final=False)
    assert checkpoints.has_manifest(1)  # the weights are announceable before the state fails
    writer._state_writer.submit(lambda: None).result()  # v1's state write has ended
    with pytest.raises(CheckpointError, match="part 'trainer_state' was written already"):
        writer.write(e, 2, 1, OFFSETS, final=False)
    assert not checkpoints.has_manifest(2)


def test_reference_model_stays_the_base_model_across_a_restart(tmp_path: Path) -> None:
    first = engine()
    base = {k: v.detach().clone() for k, v in first.ref_model.state_dict().items()}
    train(first, range(2))
    writer = TrainerCheckpointer(store(tmp_path), save_interval=1)
    writer.write(first, 2, 0, OFFSETS, final=True)
    writer.close()

    resumed = engine()
    TrainerCheckpointer(store(tmp_path), save_interval=1).restore(resumed)
    ref = resumed.ref_model.state_dict()
    assert all(torch.equal(base[k], ref[k]) for k in base)
    trained = weights(resumed)
    assert any(not torch.equal(base[k], trained[k]) for k in base)


def test_explorer_download_leaves_training_state_out(tmp_path: Path) -> None:
    checkpoints = store(tmp_path)
    e = engine()
    train(e, range(1))
    writer = TrainerCheckpointer(checkpoints, save_interval=1)
    writer.write(e, 1, 0, OFFSETS, final=True, sampler_state={"sampler": {}})
    writer.close()
    _, full = checkpoints.read_files(1)
    _, lean = checkpoints.read_files(1, skip_prefixes=(TRAINER_STATE_DIR,))
    assert TRAINER_STATE_DIR + "sampler.json" in full
    assert not any(name.startswith(TRAINER_STATE_DIR) for name in lean)
    assert "model.safetensors" in lean
    # the training state is a part of its own, which an explorer never reads
    listing, state = checkpoints.read_part(1, STATE_PART) or (None, {})
    assert listing is not None and any(n.startswith(TRAINER_STATE_DIR) for n in state)
    assert not set(state) & set(full)


def test_bf16_versions_are_half_the_bytes_and_resume_exactly_from_the_master_copy(
    tmp_path: Path,
) -> None:
    straight = engine()
    train(straight, range(4))

    checkpoints = store(tmp_path)
    first = engine()
    train(first, range(2))
    writer = TrainerCheckpointer(checkpoints, save_interval=100, weights_dtype=torch.bfloat16)
    manifest = writer.write(first, 1, 0, OFFSETS, final=False)  # weights only
    sizes = {f.name: f.size for f in manifest.files}
    fp32 = TrainerCheckpointer(store(tmp_path / "fp32"), save_interval=100).write(
        first, 1, 0, OFFSETS, final=False
    )
    fp32_size = {f.name: f.size for f in fp32.files}["model.safetensors"]
    assert sizes["model.safetensors"] < 0.55 * fp32_size
    published = tensors_of_files(checkpoints.read_files(1)[1], "v1")
    assert {t.dtype for t in published.values()} == {torch.bfloat16}

    writer.write(first, 2, 1, OFFSETS, final=True)  # with state: the fp32 master rides along
    writer.close()
    resumed = engine()
    TrainerCheckpointer(checkpoints, save_interval=100, weights_dtype=torch.bfloat16).restore(
        resumed
    )
    train(resumed, range(2, 4))
    expect, got = weights(straight), weights(resumed)
    assert all(torch.equal(expect[k], got[k]) for k in expect)


def test_restoring_rounded_weights_without_a_master_copy_says_so(tmp_path: Path, caplog) -> None:
    first = engine()
    train(first, range(2))
    TrainerCheckpointer(store(tmp_path), save_interval=100, weights_dtype=torch.bfloat16).write(
        first, 2, 0, OFFSETS, final=False
    )
    resumed = engine()
    with caplog.at_level(logging.WARNING):
        TrainerCheckpointer(store(tmp_path), save_interval=100).restore(resumed)
    assert "holds bfloat16 weights and no master copy" in caplog.text
    rounded = {k: v.to(torch.bfloat16).float() for k, v in weights(first).items()}
    assert all(torch.equal(rounded[k], v) for k, v in weights(resumed).items())


def test_every_version_carries_the_model_files_the_engine_wrote_once(tmp_path: Path) -> None:
    class Counting(TorchTrainerEngine):
        calls = 0

        def save_hf(self, directory, dtype=None, *, weights=True):  # type: ignore[no-untyped-def]
            Counting.calls += 1
            return super().save_hf(directory, dtype, weights=weights)

    model, tok = load_model("tiny")
    e = Counting(model, CONFIG, tokenizer=tok)
    checkpoints = store(tmp_path)
    writer = TrainerCheckpointer(checkpoints, save_interval=100)
    for step in (1, 2, 3):
        train(e, range(step - 1, step))
        writer.write(e, step, step - 1, OFFSETS, final=False)
    assert Counting.calls == 1
    reference = tmp_path / "reference"
    TorchTrainerEngine.save_hf(e, reference, weights=False)
    expected = {p.relative_to(reference).as_posix() for p in reference.rglob("*") if p.is_file()}
    assert {"config.json", "tokenizer.json"} <= expected
    for step in (1, 3):
        _, files = checkpoints.read_files(step)
        assert {n: bytes(files[n]) for n in expected} == {
            n: (reference / n).read_bytes() for n in expected
        }


def test_a_state_due_while_the_last_is_going_up_is_deferred_not_waited_for(
    tmp_path: Path,
) -> None:
    """One training state is written at a time. A version whose state falls due while the last
    one is still going up is written without it, at once, and the first version after that state
    is durable carries one; the run's last version waits for the state in flight and carries its
    own."""
    checkpoints = store(tmp_path)
    e = engine()
    writer = TrainerCheckpointer(checkpoints, save_interval=1)
    held = threading.Event()
    writer._state_writer.submit(held.wait, 30)  # v1's state queues behind this
    for step in (1, 2):
        train(e, range(step - 1, step))
        writer.write(e, step, step - 1, OFFSETS, final=False)  # v2 returns while v1's is held
    held.set()
    writer.wait_for_state()
    later = threading.Event()
    train(e, range(2, 3))
    writer._state_writer.submit(later.wait, 30)  # v3's state queues behind this
    writer.write(e, 3, 2, OFFSETS, final=False)
    threading.Timer(0.5, later.set).start()
    train(e, range(3, 4))
    writer.write(e, 4, 3, OFFSETS, final=True)  # waits for v3's state, then carries its own
    writer.close()
    carried = [v for v in (1, 2, 3, 4) if checkpoints.read_part(v, STATE_PART) is not None]
    assert carried == [1, 3, 4]


class _GatedStore(LocalObjectStore):
    """A local store whose writes of the training state's files, and of a version's weights,
    wait at a gate each (a slow disk, held still), and which records the order writes end in."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.state_gate, self.weights_gate = threading.Event(), threading.Event()
        self.weights_started = threading.Event()
        self.finished: list[str] = []

    def put_stream(self, key: str, stream: Any, length: int) -> Any:
        if "/trainer_state/optimizer" in key:
            assert self.state_gate.wait(10)
        elif key.endswith("model.safetensors"):
            self.weights_started.set()
            assert self.weights_gate.wait(10)
        info = super().put_stream(key, stream, length)
        self.finished.append(key)
        return info


def test_a_training_state_going_up_waits_while_the_next_versions_weights_go_up(
    tmp_path: Path,
) -> None:
    objects = _GatedStore(tmp_path / "objects")
    objects.weights_gate.set()
    checkpoints = CheckpointStore(objects, "proj", "run")
    e = engine()
    train(e, range(1))
    writer = TrainerCheckpointer(checkpoints, save_interval=1)
    writer.write(e, 1, 0, OFFSETS, final=False)  # v1 carries the state; it starts going up
    train(e, range(1, 2))
    objects.weights_gate.clear()
    objects.weights_started.clear()  # set by v1's weights: wait for v2's
    writer.begin(e, 2, 1, OFFSETS, final=False)
    assert objects.weights_started.wait(10)  # v2's weights are going up, held at the gate
    objects.state_gate.set()  # the state's files may go now, as far as the disk goes
    time.sleep(0.5)
    assert not any("/trainer_state/optimizer" in key for key in objects.finished)
    assert checkpoints.read_part(1, STATE_PART) is None
    objects.weights_gate.set()
    writer.land()
    writer.wait_for_state()
    state_keys = [i for i, key in enumerate(objects.finished) if "/trainer_state/optimizer" in key]
    v2_weights = [
        i
        for i, key in enumerate(objects.finished)
        if key.endswith("model.safetensors") and "/v000002/" in key
    ]
    assert state_keys and v2_weights and max(v2_weights) < min(state_keys)
    assert checkpoints.read_part(1, STATE_PART) is not None
    writer.close()


class _SlowDeleteStore(_GatedStore):
    """A `_GatedStore` whose deletions wait at a gate of their own (unlinking a big version's
    files on a busy disk took seconds), and which records when each deletion ran."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.delete_gate = threading.Event()
        self.deleting = threading.Event()
        self.deleted: list[str] = []

    def delete(self, key: str) -> None:
        self.deleting.set()
        assert self.delete_gate.wait(10)
        super().delete(key)
        self.deleted.append(key)
        self.finished.append(f"deleted {key}")


def _two_versions(
    objects: _SlowDeleteStore,
) -> tuple[CheckpointStore, TorchTrainerEngine, TrainerCheckpointer]:
    """v1 and v2 landed on `objects`, weights only: v1 is what retention keeping one deletes."""
    checkpoints = CheckpointStore(objects, "proj", "run")
    e = engine()
    writer = TrainerCheckpointer(checkpoints, save_interval=100)
    for step in (1, 2):
        train(e, range(step - 1, step))
        writer.write(e, step, step - 1, OFFSETS, final=False)
    return checkpoints, e, writer


def test_retention_deleting_an_old_version_does_not_hold_up_the_next_upload(
    tmp_path: Path,
) -> None:
    """Pruning runs on a thread of its own: on two H200s, queued in front of the next version's
    upload, deleting an old version held that version 7 s. Here the deletion is held still, and
    the next version lands meanwhile."""
    objects = _SlowDeleteStore(tmp_path / "objects")
    objects.weights_gate.set()
    objects.state_gate.set()
    checkpoints, e, writer = _two_versions(objects)
    writer.prune_behind(1, None)
    assert objects.deleting.wait(10)  # v1's deletion has begun and is held
    train(e, range(2, 3))
    writer.write(e, 3, 2, OFFSETS, final=False)  # begins and lands v3
    assert checkpoints.has_manifest(3) and not objects.deleted
    objects.delete_gate.set()
    writer.close()
    assert checkpoints.list_versions() == [2, 3]
