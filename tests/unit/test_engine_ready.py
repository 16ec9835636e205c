"""A trainer that shares the explorer's GPU starts once the explorer's rollout engine is up: the
engine announces it with the ready file its environment names, and the local launcher waits for
that file (or the explorer's exit) before it starts the trainer."""

from __future__ import annotations

import sys
from pathlib import Path

from rft.config.schema import (
    BufferConfig,
    ClusterConfig,
    ExplorerConfig,
    ModelConfig,
    RftConfig,
    RolloutModelConfig,
)
from rft.engines.engine_ready import ENGINE_READY_FILE_ENV
from rft.engines.models import ModelSpec
from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
from rft.supervisor.launchers import shares_gpu, wait_for_engine
from rft.supervisor.process_group import ProcessGroup

ANNOUNCES_LATE = (
    "import time\n"
    "from rft.engines.engine_ready import announce_ready\n"
    "time.sleep(1.0)\n"
    "announce_ready('engine up')\n"
    "while True: time.sleep(0.1)\n"
)


def cfg_of(gpu_per_node: int, engine_num: int = 1) -> RftConfig:
    return RftConfig(
        project="p",
        name="n",
        model=ModelConfig(model_path="tiny"),
        buffer=BufferConfig(batch_size=1),
        cluster=ClusterConfig(node_num=1, gpu_per_node=gpu_per_node),
        explorer=ExplorerConfig(rollout_model=RolloutModelConfig(engine_num=engine_num)),
    )


def test_the_trainer_shares_the_gpu_only_when_the_engines_take_every_gpu() -> None:
    assert shares_gpu(cfg_of(1))
    assert shares_gpu(cfg_of(2, engine_num=2))
    assert not shares_gpu(cfg_of(2))  # the trainer has cuda:1
    assert not shares_gpu(cfg_of(0))  # CPU: no GPU memory to profile


def test_building_an_engine_writes_the_ready_file_its_environment_names(
    tmp_path: Path, monkeypatch
) -> None:
    ready = tmp_path / "ready"
    monkeypatch.setenv(ENGINE_READY_FILE_ENV, str(ready))
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    assert engine.model_version == 0
    assert ready.read_text().startswith("hf engine up in ")


def test_the_launcher_waits_for_the_engine_of_a_running_explorer(tmp_path: Path) -> None:
    group = ProcessGroup(log_dir=tmp_path)
    ready = tmp_path / "explorer.engine-ready"
    group.start(
        "explorer", [sys.executable, "-c", ANNOUNCES_LATE], {ENGINE_READY_FILE_ENV: str(ready)}
    )
    try:
        assert not ready.exists()
        assert wait_for_engine(group, ready, poll_s=0.05)
        assert ready.read_text() == "engine up\n"
        assert group.running()  # the explorer goes on; the trainer would start now
    finally:
        group.stop(grace_s=2)


def test_an_explorer_that_fails_before_its_engine_is_up_ends_the_wait(tmp_path: Path) -> None:
    group = ProcessGroup(log_dir=tmp_path)
    ready = tmp_path / "explorer.engine-ready"
    group.start(
        "explorer",
        [sys.executable, "-c", "raise SystemExit(1)"],
        {ENGINE_READY_FILE_ENV: str(ready)},
    )
    assert not wait_for_engine(group, ready, poll_s=0.05)
    assert [f.name for f in group.failures()] == ["explorer"]
