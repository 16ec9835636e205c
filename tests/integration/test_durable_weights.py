"""The durable weight path on the real MinIO: a trainer's version streamed from its tensors,
loaded by an explorer's engine from the downloaded buffers; the training state written behind
the announcement, and a restart from it exact."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rft.config.connections import StackSettings
from rft.consumers.explorer.weight_follower import load_version
from rft.consumers.trainer.checkpoint import STATE_PART, TrainerCheckpointer
from rft.engines.models import ModelSpec, load_model
from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine
from rft.storage import CheckpointStore, S3ObjectStore
from rft.storage.checkpoint_store import TRAINER_STATE_DIR
from tests.unit.test_engines_trainer import _batch, maximise_logprob

pytestmark = pytest.mark.integration

OFFSETS = [("exp", 0, 4)]
# a model big enough that its weights file spans several S3 parts (16 MiB) both ways
BIG = {"hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 4}


def trainer_engine(**options: int) -> TorchTrainerEngine:
    model, tok = load_model(ModelSpec("tiny", options=dict(options)))
    return TorchTrainerEngine(model, TorchTrainerConfig(lr=5e-2, micro_batch_size=2), tokenizer=tok)


def test_a_published_version_loads_into_the_explorer_engine_from_memory(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    trainer = trainer_engine(**BIG)
    trainer.train_step(_batch(4, seed=0), maximise_logprob)
    objects = S3ObjectStore(stack.object_store, bucket="rft-it", prefix=unique)
    checkpoints = CheckpointStore(objects, "proj", "run")
    writer = TrainerCheckpointer(checkpoints, save_interval=100)
    manifest = writer.write(trainer, 1, 0, OFFSETS, final=False, sampler_state={"s": 1})
    writer.close()
    assert manifest.file("model.safetensors").size > 2 * (16 << 20)
    explorer = create_rollout_engine(
        "hf", RolloutEngineConfig(model=ModelSpec("tiny", options=BIG))
    )
    load_version(explorer, checkpoints, 1)
    assert explorer.model_version == 1
    want, got = trainer.model.state_dict(), explorer.state_dict()
    assert all(torch.equal(want[k], got[k]) for k in got)
    # the HF directory's other files ride along; nothing of the training state
    names = {f.name for f in manifest.files}
    assert {"config.json", "model.safetensors", TRAINER_STATE_DIR + "sampler.json"} <= names
    assert checkpoints.read_part(1, STATE_PART) is None


@pytest.mark.parametrize("shards", [False, True], ids=["one-file", "sharded"])
def test_training_state_written_behind_the_announcement_resumes_exactly(
    stack: StackSettings, unique: str, shards: bool
) -> None:
    straight = trainer_engine()
    for step in range(4):
        straight.train_step(_batch(4, seed=step), maximise_logprob)

    objects = S3ObjectStore(stack.object_store, bucket="rft-it", prefix=unique)
    checkpoints = CheckpointStore(objects, "proj", "run")
    first = trainer_engine()
    # sharded: the published bf16 weights and the float32 master copy each cut in several
    # files, moved at once; a resume must put them back together exactly
    shard_bytes = sum(p.nbytes for p in first.model.parameters()) // 8 if shards else 1 << 40
    writer = TrainerCheckpointer(
        checkpoints, save_interval=2, weights_dtype=torch.bfloat16, shard_bytes=shard_bytes
    )
    for step in range(1, 3):
        first.train_step(_batch(4, seed=step - 1), maximise_logprob)
        manifest = writer.write(first, step, step - 1, OFFSETS, final=False)
    writer.close()
    assert checkpoints.read_part(1, STATE_PART) is None  # not due at step 1
    part = checkpoints.read_part(2, STATE_PART)
    assert part is not None
    published = [f.name for f in manifest.files if f.name.endswith(".safetensors")]
    master = [n for n in part[1] if n.startswith("trainer_state/master/")]
    master = [n for n in master if n.endswith(".safetensors")]
    assert (len(published) > 1, len(master) > 1) == (shards, shards)
    # AdamW's moments stream as safetensors beside a small skeleton (rft.engines.state_files)
    moments = [n for n in part[1] if n.startswith("trainer_state/optimizer/")]
    assert "trainer_state/optimizer/skeleton.pt" in moments
    assert any(n.endswith(".safetensors") for n in moments)
    assert ("model.safetensors.index.json" in {f.name for f in manifest.files}) == shards

    resumed = trainer_engine()
    step, offsets = TrainerCheckpointer(checkpoints, 2, torch.bfloat16).restore(resumed)
    assert (step, offsets) == (2, {("exp", 0): 4})
    for s in range(2, 4):
        resumed.train_step(_batch(4, seed=s), maximise_logprob)
    want, got = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(want[k], got[k]) for k in want)
