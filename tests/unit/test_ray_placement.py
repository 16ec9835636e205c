"""The ray launcher's placement group, sized from `cluster.node_num × gpu_per_node`: the rollout
engines take `engine_num × tensor_parallel_size` GPUs, the trainer ranks one each, and a config
whose processes cannot fit its cluster is refused at load under the key at fault."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.catalog import load_config
from rft.config import ConfigValidationError, ConfigWarning
from rft.config.schema import (
    BufferConfig,
    ClusterConfig,
    ExplorerConfig,
    ModelConfig,
    RftConfig,
    RolloutModelConfig,
)
from rft.supervisor.launchers import LAUNCHERS, RunCommand
from rft.supervisor.ray_group import child_env
from rft.supervisor.ray_placement import placement_issues, plan_placement, trainer_world_size
from tests.unit.config_samples import MINIMAL


def cfg_of(node_num: int, gpu_per_node: int, engine_num: int = 1, tp: int = 1) -> RftConfig:
    return RftConfig(
        project="p",
        name="n",
        model=ModelConfig(model_path="tiny"),
        buffer=BufferConfig(batch_size=1),
        cluster=ClusterConfig(node_num=node_num, gpu_per_node=gpu_per_node, launcher="ray"),
        explorer=ExplorerConfig(
            rollout_model=RolloutModelConfig(engine_num=engine_num, tensor_parallel_size=tp)
        ),
    )


def load(tmp_path: Path, *overrides: str) -> RftConfig:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    return load_config(path, ["cluster.launcher=ray", *overrides])


def test_cpu_slots_hold_one_cpu_each_and_no_gpu() -> None:
    placement = plan_placement(cfg_of(1, 0, engine_num=2))
    assert [(s.name, s.verb, s.bundle) for s in placement.slots] == [
        ("explorer-0", "explore", {"CPU": 1.0}),
        ("explorer-1", "explore", {"CPU": 1.0}),
        ("trainer", "train", {"CPU": 1.0}),
    ]
    assert placement.total_gpus == placement.idle_gpus == 0


def test_rollout_takes_its_gpus_and_the_trainer_one_of_the_rest() -> None:
    placement = plan_placement(cfg_of(node_num=2, gpu_per_node=4, engine_num=3, tp=2))
    assert placement.bundles == [{"CPU": 1.0, "GPU": 2.0}] * 3 + [{"CPU": 1.0, "GPU": 1.0}]
    assert (placement.rollout_gpus, placement.trainer_gpus, placement.idle_gpus) == (6, 1, 1)


def test_trainer_ranks_follow_the_world_size_hook() -> None:
    cfg = cfg_of(node_num=1, gpu_per_node=4)
    assert trainer_world_size(cfg) == 1
    cfg.trainer.world_size = 3  # type: ignore[attr-defined]  # the FSDP2 engine's key
    placement = plan_placement(cfg)
    trainers = [s for s in placement.slots if s.verb == "train"]
    assert [(s.name, s.rank, s.world_size, s.gpus) for s in trainers] == [
        ("trainer-0", 0, 3, 1),
        ("trainer-1", 1, 3, 1),
        ("trainer-2", 2, 3, 1),
    ]
    rendezvous = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    env = child_env(trainers[2], placement, rendezvous)
    assert env["RANK"] == "2" and env["WORLD_SIZE"] == "3" and env["LOCAL_RANK"] == "0"
    assert env["MASTER_ADDR"] == "10.0.0.1" and env["RFT_DEVICE"] == "cuda:0"
    explorer_env = child_env(placement.slots[0], placement, rendezvous)
    assert "RANK" not in explorer_env and "MASTER_ADDR" not in explorer_env
    cfg.trainer.world_size = 4  # type: ignore[attr-defined]
    assert [i.path for i in placement_issues(cfg)] == ["cluster.gpu_per_node"]


def test_declared_gpus_compute_on_the_cpu() -> None:
    cfg = cfg_of(node_num=1, gpu_per_node=2)
    cfg.cluster.device = "cpu"
    placement = plan_placement(cfg)
    assert placement.bundles == [{"CPU": 1.0, "GPU": 1.0}] * 2  # still GPU-shaped for Ray
    assert all("RFT_DEVICE" not in child_env(s, placement, {}) for s in placement.slots)


def pack_first_fit(node_num: int, gpu_per_node: int, sizes: list[int]) -> bool:
    """Whether bundles of these GPU counts fit on the nodes, largest first (an oracle)."""
    free = [gpu_per_node] * node_num
    for size in sorted(sizes, reverse=True):
        node = next((i for i, f in enumerate(free) if f >= size), None)
        if node is None:
            return False
        free[node] -= size
    return True


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 4), st.integers(1, 8), st.integers(1, 8), st.integers(1, 8), st.integers(1, 3)
)
def test_a_config_passes_exactly_when_its_bundles_pack_onto_the_nodes(
    node_num: int, gpu_per_node: int, engine_num: int, tp: int, world: int
) -> None:
    cfg = cfg_of(node_num, gpu_per_node, engine_num, tp)
    cfg.trainer.world_size = world  # type: ignore[attr-defined]
    sizes = [tp] * engine_num + [1] * world
    fits = pack_first_fit(node_num, gpu_per_node, sizes)
    assert (placement_issues(cfg) == []) == fits
    if fits:
        placement = plan_placement(cfg)
        assert sorted(int(b["GPU"]) for b in placement.bundles) == sorted(sizes)
        assert placement.idle_gpus == node_num * gpu_per_node - sum(sizes) >= 0


def test_a_run_that_cannot_fit_is_refused_at_load_under_its_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigValidationError, match=r"cluster\.gpu_per_node.*leave 0"):
        load(tmp_path, "cluster.gpu_per_node=1")
    with pytest.raises(ConfigValidationError, match=r"tensor_parallel_size.*holds 0 engine"):
        load(tmp_path, "cluster.gpu_per_node=2", "explorer.rollout_model.tensor_parallel_size=4")


def test_the_launcher_name_is_checked_against_its_registry(tmp_path: Path) -> None:
    with pytest.raises(ConfigValidationError, match=r"cluster\.launcher.*did you mean 'ray'"):
        load(tmp_path, "cluster.launcher=rey")
    assert LAUNCHERS.names() == ["local", "ray"]


def test_ray_notices_say_what_idle_gpus_and_more_engines_mean(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        load(
            tmp_path,
            "cluster.node_num=2",
            "cluster.gpu_per_node=2",
            "explorer.rollout_model.engine_num=2",
        )
    notes = [str(w.message) for w in record if w.category is ConfigWarning]
    assert any("1 of the 4 GPUs stay idle" in n for n in notes), notes
    assert any("one per engine" in n for n in notes), notes
    # Ray places processes across the nodes: no "this machine only" notice
    assert not any("this machine only" in n for n in notes), notes


def test_the_run_command_is_what_every_component_runs(tmp_path: Path) -> None:
    command = RunCommand(tmp_path / "run.yaml", ("a.b=1",))
    assert command.args("train") == [
        "-m",
        "rft.cli.main",
        "train",
        "--config",
        str(tmp_path / "run.yaml"),
        "--override",
        "a.b=1",
    ]


def test_ray_is_imported_only_to_launch(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(MINIMAL)
    code = (
        "import sys\n"
        "from rft.catalog import load_config\n"
        "from rft.supervisor.run_supervisor import RunSupervisor\n"
        f"load_config({str(tmp_path / 'run.yaml')!r}, ['cluster.launcher=ray'])\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_the_ray_launcher_places_the_weight_group_rendezvous_on_the_trainers_node() -> None:
    from rft.config.schema import SynchronizerConfig
    from rft.supervisor.ray_group import needs_weight_group_address, weight_group_override

    assert not needs_weight_group_address(SynchronizerConfig())  # checkpoint: no group
    fast = SynchronizerConfig(sync_method="nccl")
    assert needs_weight_group_address(fast)  # the loopback default reaches no other node
    named = SynchronizerConfig(sync_method="nccl", weight_group_address="10.1.2.3:4000")
    assert not needs_weight_group_address(named)  # what the config names is kept
    assert weight_group_override("10.0.0.7", 41000) == (
        "synchronizer.weight_group_address=10.0.0.7:41000"
    )
