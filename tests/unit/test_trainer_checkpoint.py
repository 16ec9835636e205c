"""Trainer checkpoints: a restart with training state continues the same optimisation exactly (also
when versions are published in bf16: the float32 master copy rides along); one without it keeps
the weights and the LR schedule but restarts AdamW; the KL reference stays the base model;
explorers' downloads leave the training state out."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from rft.consumers.trainer.checkpoint import TrainerCheckpointer
from rft.engines.models import load_model
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine
from rft.engines.weights import read_safetensors_dir
from rft.storage import CheckpointStore, LocalObjectStore
from rft.storage.checkpoint_store import TRAINER_STATE_DIR
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


def test_restart_with_training_state_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    straight = engine()
    train(straight, range(4))

    first = engine()
    train(first, range(2))
    TrainerCheckpointer(store(tmp_path), save_interval=100).write(first, 2, 0, OFFSETS, final=True)

    resumed = engine()
    step, offsets = TrainerCheckpointer(store(tmp_path), save_interval=100).restore(resumed)
    assert (step, offsets) == (2, {("exp", 0): 17, ("exp", 1): 9})
    assert resumed.step == 2
    train(resumed, range(2, 4))

    expect, got = weights(straight), weights(resumed)
    assert all(torch.equal(expect[k], got[k]) for k in expect)
    assert resumed.scheduler.get_last_lr() == straight.scheduler.get_last_lr()


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
    checkpointer = TrainerCheckpointer(store(tmp_path), save_interval=3)
    e = engine()
    carried = {}
    for step in range(1, 8):
        train(e, range(step - 1, step))
        manifest = checkpointer.write(e, step, step - 1, OFFSETS, final=step == 7)
        carried[step] = any(f.name.startswith(TRAINER_STATE_DIR) for f in manifest.files)
    assert [s for s, has in carried.items() if has] == [3, 6, 7]


def test_reference_model_stays_the_base_model_across_a_restart(tmp_path: Path) -> None:
    first = engine()
    base = {k: v.detach().clone() for k, v in first.ref_model.state_dict().items()}
    train(first, range(2))
    TrainerCheckpointer(store(tmp_path), save_interval=1).write(first, 2, 0, OFFSETS, final=True)

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
    TrainerCheckpointer(checkpoints, save_interval=1).write(e, 1, 0, OFFSETS, final=True)
    full = checkpoints.download(1, tmp_path / "full")
    lean = checkpoints.download(1, tmp_path / "lean", skip_prefixes=(TRAINER_STATE_DIR,))
    assert (full / TRAINER_STATE_DIR).is_dir()
    assert not (lean / TRAINER_STATE_DIR).exists()
    assert sorted(p.name for p in lean.glob("*.safetensors")) == sorted(
        p.name for p in full.glob("*.safetensors")
    )


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
    published = read_safetensors_dir(checkpoints.download(1, tmp_path / "v1"))
    assert {t.dtype for t in published.values()} == {torch.bfloat16}

    writer.write(first, 2, 1, OFFSETS, final=True)  # with state: the fp32 master rides along
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
