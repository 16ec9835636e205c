"""The fast weight path (`synchronizer.sync_method: nccl`, `memory`) against the real store and Kafka.

An explorer loads a version received over the weight-sync group before its manifest exists, and
that version is the one the store then holds (sha256 of every tensor); a step sampled with it may
commit only once the version is announced with a manifest that carries the token the weights came
with; a version number written again by another trainer is caught and replaced from the store; an
explorer that missed a broadcast loads from the store. And the whole loop, trainer and explorer
processes, with `sync_method: nccl` over gloo and with `memory` through /dev/shm, on the CPU.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from rft.config.connections import StackSettings
from rft.consumers.explorer.weight_follower import WeightFollower
from rft.consumers.trainer.checkpoint import TrainerCheckpointer
from rft.engines.fsdp_ranks import free_port
from rft.engines.models import ModelSpec
from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
from rft.engines.weights import tensors_of_files
from rft.events.models import Experience, WeightVersion
from rft.events.topics import TopicNames, ensure_topics
from rft.storage import CheckpointStore, S3ObjectStore
from rft.synchronizer.fast_path import FAST_TOKEN
from rft.synchronizer.weight_group import WeightGroupHost, WeightGroupMember
from tests.integration.test_durable_weights import trainer_engine
from tests.integration.test_rft_loop import (
    STEPS,
    check_honest_versions,
    published_run,
    read_all,
    run_trainer_and_explorer,
)
from tests.integration.test_weight_follower import announce
from tests.unit.test_engines_trainer import _batch, maximise_logprob
from tests.unit.weight_group_peer import digest

pytestmark = pytest.mark.integration

OFFSETS = [("exp", 0, 4)]


def stored(checkpoints: CheckpointStore, version: int) -> dict[str, torch.Tensor]:
    _, files = checkpoints.read_files(version, skip_prefixes=("trainer_state/",))
    return tensors_of_files(files, checkpoints.uri(version))


def in_order(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: tensors[k] for k in sorted(tensors)}


def joined(host: WeightGroupHost, member: WeightGroupMember, weights: dict) -> None:
    """Send version 0 (never loaded: every engine holds it) until the member is in the group."""
    deadline = time.monotonic() + 120
    while member.member_id not in host.send(0, 0, weights):
        assert time.monotonic() < deadline, "the member never joined"
        time.sleep(0.2)
    while member.peek_version() != 0 or member.versions_received == 0:
        time.sleep(0.05)
    member.take()


def test_a_version_from_the_group_is_sampled_at_once_and_committed_only_once_durable(
    stack: StackSettings, unique: str
) -> None:
    topics = TopicNames.for_run("rft-it", unique)
    ensure_topics(stack.kafka, topics)
    objects = S3ObjectStore(stack.object_store, bucket="rft-it", prefix=unique)
    checkpoints = CheckpointStore(objects, "proj", "run")
    trainer = trainer_engine()
    host = WeightGroupHost(f"127.0.0.1:{free_port()}", 10.0)
    writer = TrainerCheckpointer(checkpoints, save_interval=100, fast=host)
    explorer = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    member = WeightGroupMember(f"127.0.0.1:{host.port}", 10.0, "explorer-a")
    follower = WeightFollower(stack.kafka, topics.weights, unique, checkpoints, fast=member)
    try:
        joined(host, member, trainer.export_weights())
        trainer.train_step(_batch(4, seed=0), maximise_logprob)
        seen: dict[str, object] = {}

        def before_manifest(manifest) -> None:
            # the files are up, the manifest not yet: the explorer has the version already
            assert follower.wait_for(1, timeout_s=60) == 1
            assert follower.load_newest(explorer) and explorer.model_version == 1
            seen["why"] = follower.confirm({1}, timeout_s=1.0)
            seen["has_manifest"] = checkpoints.has_manifest(1)

        manifest = writer.write(trainer, 1, 0, OFFSETS, final=False, before_commit=before_manifest)
        assert seen["has_manifest"] is False
        assert "was not announced" in str(seen["why"])  # the step could not commit then
        # a step sampled with version 1 still waits: the manifest exists but is not announced
        assert follower.unconfirmed == {1: int(manifest.extra[FAST_TOKEN])}
        announce(stack, topics.weights, checkpoints, 1)
        assert follower.confirm({1}, timeout_s=60) is None
        assert follower.unconfirmed == {}
        # what the explorer serves is what the store holds, tensor for tensor
        served = {k: v for k, v in explorer.state_dict().items() if k in stored(checkpoints, 1)}
        assert digest(in_order(served)) == digest(in_order(stored(checkpoints, 1)))

        # version 2 is broadcast, then its trainer dies before the manifest ...
        trainer.train_step(_batch(4, seed=1), maximise_logprob)

        def dies(manifest) -> None:
            raise RuntimeError("the trainer died before the manifest")

        with pytest.raises(RuntimeError, match="died before the manifest"):
            writer.write(trainer, 2, 1, OFFSETS, final=False, before_commit=dies)
        assert follower.wait_for(2, timeout_s=60) == 2
        assert follower.load_newest(explorer) and explorer.model_version == 2
        received = {k: v.clone() for k, v in explorer.state_dict().items()}
        # ... and its successor writes version 2 from other weights
        successor = trainer_engine()
        successor.train_step(_batch(4, seed=7), maximise_logprob)
        TrainerCheckpointer(checkpoints, save_interval=100).write(
            successor, 2, 1, OFFSETS, final=False
        )
        announce(stack, topics.weights, checkpoints, 2)
        why = follower.confirm({2}, timeout_s=60)
        assert why is not None and "not the one received" in why
        follower.fall_back(explorer)  # the step is redone on the durable version 2
        served = {k: v for k, v in explorer.state_dict().items() if k in stored(checkpoints, 2)}
        assert digest(in_order(served)) == digest(in_order(stored(checkpoints, 2)))
        lost = {k: v for k, v in received.items() if k in served}
        assert digest(in_order(lost)) != digest(in_order(served))  # the received ones are gone
        assert explorer.model_version == 2 and follower.unconfirmed == {}

        # an explorer that joins now missed every broadcast: it loads from the store
        late_member = WeightGroupMember(f"127.0.0.1:{host.port}", 10.0, "explorer-late")
        with WeightFollower(
            stack.kafka, topics.weights, unique + "-late", checkpoints, fast=late_member
        ) as late:
            late_engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
            assert late.wait_for(2, timeout_s=60) == 2
            assert late.load_newest(late_engine) and late_engine.model_version == 2
            assert late.fast_loads == 0 and late.unconfirmed == {}
    finally:
        follower.close()
        writer.close()


# memory: on the CPU through /dev/shm, trainer and explorer being processes of one host
@pytest.mark.parametrize("sync_method", ["nccl", "memory"])
def test_the_loop_runs_with_the_weight_group(
    stack: StackSettings, unique: str, tmp_path: Path, sync_method: str
) -> None:
    config_path, cfg, plan = published_run(
        stack,
        unique,
        tmp_path,
        "fixed",
        1,
        {"sync_method": sync_method, "weight_group_address": f"127.0.0.1:{free_port()}"},
    )
    outputs = run_trainer_and_explorer(config_path)
    versions = [
        e for e in read_all(cfg, plan.topics.weights, unique + "-w") if isinstance(e, WeightVersion)
    ]
    announced = [v.version for v in versions]
    assert announced == list(range(1, STEPS + 1)), outputs["trainer"][-2000:]
    experiences = [
        e for e in read_all(cfg, plan.experience_topic, unique + "-e") if isinstance(e, Experience)
    ]
    assert len(experiences) == STEPS * 2 * 4
    assert {e.model_version for e in experiences} == set(range(STEPS))
    # the versions the explorer sampled with came over the group (the first may have come
    # from the store, if the explorer joined after it was sent) ...
    fast = [
        v
        for v in range(1, STEPS)
        if f"loaded weight version {v} from the weight-sync group" in outputs["explorer"]
    ]
    assert fast, outputs["explorer"][-3000:]
    assert "sent over the weight-sync group to 1 explorers" in outputs["trainer"]
    # ... and they are the stored ones: each experience's logprobs recompute on the store's weights
    check_honest_versions(plan, experiences, announced, tmp_path)
