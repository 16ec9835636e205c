"""RunPlan: where a run's processes compute (CPU without GPUs or with `cluster.device: cpu`, else
rollout on the first GPUs and the trainer on the next one, or sharing when there is none to spare;
a process the ray launcher placed on GPUs of its own uses its first), `auto` dtype per device, and
where checkpoints live."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rft.catalog import load_config
from rft.consumers.run_plan import PLACED_DEVICE_ENV, RunPlan
from rft.consumers.trainer.trainer import master_dtype
from rft.engines.models import ModelSpec, load_model
from rft.errors import ConfigError
from tests.unit.config_samples import MINIMAL


def plan(tmp_path: Path, *overrides: str) -> RunPlan:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    return RunPlan(load_config(path, list(overrides)))


@pytest.mark.parametrize(
    ("gpus", "engines", "tp", "explorer", "trainer"),
    [
        (0, 1, 1, "cpu", "cpu"),
        (1, 1, 1, "cuda:0", "cuda:0"),
        (2, 1, 1, "cuda:0", "cuda:1"),
        (4, 2, 1, "cuda:0", "cuda:2"),
        (4, 2, 2, "cuda:0", "cuda:0"),
        (8, 2, 2, "cuda:0", "cuda:4"),
    ],
)
def test_devices_follow_cluster_and_rollout_sizes(
    tmp_path: Path, gpus: int, engines: int, tp: int, explorer: str, trainer: str
) -> None:
    p = plan(
        tmp_path,
        f"cluster.gpu_per_node={gpus}",
        f"explorer.rollout_model.engine_num={engines}",
        f"explorer.rollout_model.tensor_parallel_size={tp}",
    )
    assert (p.explorer_device, p.trainer_device) == (explorer, trainer)


def test_device_cpu_computes_on_the_cpu_with_gpus_declared(tmp_path: Path) -> None:
    p = plan(tmp_path, "cluster.gpu_per_node=2", "cluster.device=cpu", "model.dtype=auto")
    assert (p.explorer_device, p.trainer_device, p.rollout_dtype) == ("cpu", "cpu", "float32")


def test_a_process_placed_on_its_own_gpus_computes_on_its_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the ray launcher's actors see only their bundle's GPUs (CUDA_VISIBLE_DEVICES)
    monkeypatch.setenv(PLACED_DEVICE_ENV, "cuda:0")
    p = plan(tmp_path, "cluster.gpu_per_node=4", "explorer.rollout_model.engine_num=2")
    assert (p.explorer_device, p.trainer_device) == ("cuda:0", "cuda:0")
    assert plan(tmp_path, "cluster.gpu_per_node=0").trainer_device == "cpu"


def test_auto_dtype_is_bf16_on_gpu_and_fp32_on_cpu(tmp_path: Path) -> None:
    p = plan(tmp_path, "model.dtype=auto")
    assert p.model_spec(device="cpu").dtype == "float32"
    assert p.model_spec(device="cuda:0").dtype == "bfloat16"
    assert p.resolve_dtype("float16", "cuda:0") == "float16"


def test_trainer_keeps_fp32_master_weights_and_refuses_fp16() -> None:
    assert master_dtype("bfloat16") == "float32"
    assert master_dtype("float64") == "float64"
    with pytest.raises(ConfigError, match="float16 is not trainable"):
        master_dtype("float16")


def test_missing_gpu_is_a_config_error_naming_the_key() -> None:
    index = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(ConfigError, match=r"cluster\.gpu_per_node"):
        load_model(ModelSpec("tiny", device=f"cuda:{index}"))


def test_checkpoints_go_to_the_object_store_uri_when_set(tmp_path: Path) -> None:
    p = plan(tmp_path, f"stack.object_store.uri=file://{tmp_path}/ckpt")
    store = p.checkpoint_store()
    assert store.store.uri("x").startswith(f"file://{tmp_path}/ckpt")
    assert store.latest_version() == 0
