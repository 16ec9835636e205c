"""StagePipeline on a file:// object store, with stages that write their versions directly: the
order of the stages, the record of each finished stage, the start model of the next (the previous
stage's last version, checked against its manifest and the record), a rerun that skips finished
stages, and a stage that fails stopping the pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rft.catalog import load_pipeline
from rft.config.run_stages import RunStage
from rft.config.schema import RftConfig
from rft.consumers.run_plan import RunPlan
from rft.errors import CheckpointError, RftError
from rft.supervisor.stage_pipeline import StagePipeline
from tests.unit.test_run_stages import base_config


def pipeline_of(tmp_path: Path) -> StagePipeline:
    raw = base_config(tmp_path)
    raw["checkpoint_root_dir"] = str(tmp_path / "ckpt")
    raw["stack"] = {"object_store": {"uri": f"file://{tmp_path / 'store'}"}}
    path = tmp_path / "staged.yaml"
    path.write_text(yaml.safe_dump(raw))
    return StagePipeline([(s, c) for s, c in load_pipeline(path) if s is not None])


def write_version(cfg: RftConfig, version: int, weights: bytes, tmp_path: Path) -> None:
    files = tmp_path / f"files-{cfg.name}-{version}"
    files.mkdir()
    (files / "model.safetensors").write_bytes(weights)
    (files / "config.json").write_text("{}")
    RunPlan(cfg).checkpoint_store().write(version, version, files, parent_version=version - 1)


def test_stages_run_in_order_each_from_the_last_version_of_the_one_before(
    tmp_path: Path,
) -> None:
    pipeline = pipeline_of(tmp_path)
    calls: list[tuple[str, list[str]]] = []

    def run_one(stage: RunStage, extra: list[str]) -> int:
        calls.append((stage.name, extra))
        cfg = pipeline.stages[stage.index][1]
        for v in (1, 2):
            write_version(cfg, v, f"{stage.name} v{v}".encode(), tmp_path)
        return 0

    assert pipeline.run(run_one) == 0
    (first, none), (second, extra) = calls
    assert (first, none, second) == ("sft_warmup", [], "rft")
    (override,) = extra
    key, start = override.split("=", 1)
    assert key == "model.model_path"
    # the start model is the first stage's last version, downloaded and checked
    assert (Path(start) / "model.safetensors").read_bytes() == b"sft_warmup v2"
    assert Path(start).is_relative_to(pipeline.stages[1][1].job_dir.absolute())
    records = [s.record for s in pipeline.states()]
    assert [(r.run_name, r.last_version) for r in records if r] == [
        ("n-sft_warmup", 2),
        ("n-rft", 2),
    ]
    lines, current = pipeline.status_lines()
    assert current is None and "every stage finished" in lines[-1]

    # a rerun runs nothing again
    calls.clear()
    assert pipeline.run(run_one) == 0
    assert calls == []


def test_a_failed_stage_stops_the_pipeline_and_a_rerun_resumes_it(tmp_path: Path) -> None:
    pipeline = pipeline_of(tmp_path)
    ran: list[str] = []

    def failing(stage: RunStage, extra: list[str]) -> int:
        ran.append(stage.name)
        if stage.index == 0:
            write_version(pipeline.stages[0][1], 1, b"w", tmp_path)
            return 0
        return 3

    assert pipeline.run(failing) == 3
    assert ran == ["sft_warmup", "rft"]
    lines, current = pipeline.status_lines()
    assert current is not None and current.stage.name == "rft"
    assert "finished, last version v1" in lines[1] and "running" in lines[2]

    def resumed(stage: RunStage, extra: list[str]) -> int:
        ran.append(stage.name)
        write_version(pipeline.stages[stage.index][1], 1, b"r", tmp_path)
        return 0

    ran.clear()
    assert pipeline.run(resumed) == 0
    assert ran == ["rft"]  # the finished stage is skipped


def test_a_stage_without_a_version_gives_the_next_nothing(tmp_path: Path) -> None:
    pipeline = pipeline_of(tmp_path)
    with pytest.raises(RftError, match="finished without a weight version"):
        pipeline.run(lambda stage, extra: 0)


def test_the_start_model_is_checked_against_the_record_and_the_manifest(tmp_path: Path) -> None:
    pipeline = pipeline_of(tmp_path)
    (first, sft), (_, rft) = pipeline.stages
    write_version(sft, 1, b"weights", tmp_path)
    record = pipeline.finish(first, sft)
    start = pipeline.start_model(record, rft)
    assert (start / "model.safetensors").read_bytes() == b"weights"
    assert pipeline.start_model(record, rft) == start  # reused

    # the record says another manifest: refused
    forged = type(record)(**{**record.__dict__, "manifest_sha256": "0" * 64})
    with pytest.raises(CheckpointError, match="not the one .* recorded"):
        pipeline.start_model(forged, rft)
    # a stored file changed after the record: its sha256 no longer matches the manifest
    stored = next((tmp_path / "store").rglob("model.safetensors"))
    stored.write_bytes(b"weightz")
    for old in (rft.job_dir / "start-model").iterdir():
        (old / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="model.safetensors"):
        pipeline.start_model(record, rft)
    # a second record of the stage must name the same version
    write_version(sft, 2, b"later", tmp_path)
    with pytest.raises(CheckpointError, match="finished at v1, but its run's last version is v2"):
        pipeline.finish(first, sft)
