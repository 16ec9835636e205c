"""Which trainer engine a config builds: `trainer.trainer_type` and Trinity's `trainer_strategy`
select a TRAINER_ENGINES entry (a Trinity `trainer_type: verl` runs rft's FSDP2 engine, and says
so), and `trainer.world_size` sets its ranks (default: the GPUs left after rollout, 1 on the CPU)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from rft.catalog import load_config
from rft.config import ConfigValidationError, ConfigWarning
from rft.consumers.run_plan import RunPlan
from rft.engines.fsdp_engine import Fsdp2TrainerEngine
from rft.engines.models import load_model
from rft.engines.trainer import TRAINER_ENGINES, TorchTrainerConfig, TrainerPlacement
from tests.unit.config_samples import MINIMAL


def plan(tmp_path: Path, *overrides: str) -> RunPlan:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    return RunPlan(load_config(path, list(overrides)))


def test_trinity_verl_with_fsdp_builds_the_fsdp2_engine_and_says_so(tmp_path: Path) -> None:
    with pytest.warns(ConfigWarning) as record:
        p = plan(tmp_path, "trainer.trainer_type=verl", "trainer.trainer_strategy=fsdp")
    said = "\n".join(str(w.message) for w in record)
    assert "`trainer.trainer_type: verl` is read as `fsdp2`: rft has no veRL workers" in said
    assert "`trainer.trainer_strategy: fsdp` is read as `fsdp2`" in said
    trainer = p.cfg.trainer
    assert (trainer.engine_name, trainer.world_size, p.trainer_devices) == ("fsdp2", 1, ("cpu",))

    model, tok = load_model("tiny")
    engine = TRAINER_ENGINES.get(trainer.engine_name)(
        model, tok, TorchTrainerConfig(), TrainerPlacement(p.trainer_devices)
    )
    with engine:
        assert isinstance(engine, Fsdp2TrainerEngine) and engine.world_size == 1


@pytest.mark.parametrize(
    ("overrides", "engine"),
    [
        ((), "torch"),
        (("trainer.trainer_strategy=fsdp2",), "fsdp2"),
        (("trainer.trainer_type=fsdp2",), "fsdp2"),
        (("trainer.trainer_type=verl", "trainer.trainer_strategy=fsdp2"), "fsdp2"),
    ],
)
def test_type_and_strategy_pick_the_engine(tmp_path: Path, overrides, engine: str) -> None:
    assert plan(tmp_path, *overrides).cfg.trainer.engine_name == engine


def test_megatron_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigValidationError, match="trainer.trainer_strategy.*no Megatron"):
        plan(tmp_path, "trainer.trainer_strategy=megatron")


def test_world_size_sets_cpu_ranks_of_the_fsdp2_engine_only(tmp_path: Path) -> None:
    p = plan(tmp_path, "trainer.trainer_type=fsdp2", "trainer.world_size=3")
    assert p.trainer_devices == ("cpu", "cpu", "cpu")
    with pytest.raises(ConfigValidationError, match="trainer.world_size.*torch engine runs one"):
        plan(tmp_path, "trainer.world_size=2")


@pytest.mark.parametrize(
    ("gpus", "engines", "world_size", "devices"),
    [
        (4, 1, None, ("cuda:1", "cuda:2", "cuda:3")),  # the GPUs left after rollout
        (4, 2, "1", ("cuda:2",)),
        (1, 1, None, ("cuda:0",)),  # none left: one rank beside the rollout engine
    ],
)
def test_gpu_ranks_default_to_the_gpus_left_after_rollout(
    tmp_path: Path, gpus: int, engines: int, world_size: str | None, devices: tuple
) -> None:
    overrides = [
        "trainer.trainer_type=fsdp2",
        f"cluster.gpu_per_node={gpus}",
        f"explorer.rollout_model.engine_num={engines}",
    ] + ([f"trainer.world_size={world_size}"] if world_size else [])
    with pytest.warns(ConfigWarning) if engines > 1 else contextlib.nullcontext():
        p = plan(tmp_path, *overrides)
    assert p.trainer_devices == devices
    assert p.cfg.trainer.world_size == len(devices)


def test_more_gpu_ranks_than_gpus_left_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigValidationError, match="trainer.world_size.*leaves 2 after rollout"):
        plan(
            tmp_path, "trainer.trainer_type=fsdp2", "cluster.gpu_per_node=3", "trainer.world_size=3"
        )
