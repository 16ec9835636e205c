"""A distillation run's teacher: what the config load refuses (naming the key), what loading one
refuses (another vocabulary), its weights hash and the resume check, and the torch trainer
engine scoring it in the reference model's place to fill token advantages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rft.algorithms.objective import Advantages, build_loss
from rft.algorithms.presets import resolve_algorithm
from rft.catalog import load_config
from rft.config.loader import ConfigValidationError
from rft.engines.models import ModelSpec, load_model
from rft.engines.teacher import (
    TeacherRecord,
    check_recorded,
    load_teacher,
    weights_sha256,
)
from rft.engines.trainer import RowRewards, TorchTrainerConfig, TorchTrainerEngine, TrainBatch
from rft.errors import ConfigError
from tests.unit.config_samples import MINIMAL

OPD = MINIMAL.replace("algorithm:\n", "algorithm:\n  algorithm_type: on_policy_distill\n")


def _problems(tmp_path: Path, extra: str) -> dict[str, str]:
    path = tmp_path / "run.yaml"
    path.write_text(OPD + extra, encoding="utf-8")
    with pytest.raises(ConfigValidationError) as info:
        load_config(path)
    return {p.path: str(p) for p in info.value.problems}


def test_a_distillation_run_without_a_teacher_is_refused(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "")
    assert "needs a teacher" in problems["explorer.auxiliary_models"]


def test_an_openai_teacher_has_no_weights_to_score_with(tmp_path: Path) -> None:
    extra = "explorer:\n  auxiliary_models:\n    - {engine_type: openai, base_url: 'http://x/v1'}\n"
    problems = _problems(tmp_path, extra)
    assert "has no local weights" in problems["explorer.auxiliary_models[0].engine_type"]


@pytest.mark.parametrize("entry", ["{name: teacher}", "{model_path: tiny}"])
def test_a_teacher_must_be_another_model_than_the_student(tmp_path: Path, entry: str) -> None:
    problems = _problems(tmp_path, f"explorer:\n  auxiliary_models:\n    - {entry}\n")
    assert "the student's own model" in problems["explorer.auxiliary_models[0].model_path"]


def test_an_engine_that_cannot_score_a_teacher_is_refused(tmp_path: Path) -> None:
    extra = (
        "explorer:\n  auxiliary_models:\n    - {model_path: /some/teacher}\n"
        "trainer:\n  trainer_type: fsdp2\n"
    )
    problems = _problems(tmp_path, extra)
    assert "cannot score a teacher" in problems["trainer.trainer_type"]


def test_a_teacher_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        OPD.replace("algorithm_type: on_policy_distill", "algorithm_type: jsd")
        + "explorer:\n  auxiliary_models:\n    - {model_path: /some/teacher}\n",
        encoding="utf-8",
    )
    cfg = load_config(path)
    assert resolve_algorithm(cfg.algorithm).uses_teacher


def _tiny(seed: int = 0) -> tuple[Any, Any]:
    return load_model(ModelSpec("tiny", seed=seed))


def _saved(tmp_path: Path, name: str, seed: int, extra_token: str | None = None) -> Path:
    model, tokenizer = _tiny(seed)
    if extra_token is not None:
        tokenizer.add_tokens([extra_token])
    out = tmp_path / name
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_a_teacher_with_another_vocabulary_is_refused_naming_the_key(tmp_path: Path) -> None:
    _, student_tokenizer = _tiny()
    other = _saved(tmp_path, "other", seed=1, extra_token="<teacher-only>")
    with pytest.raises(ConfigError, match=r"explorer\.auxiliary_models\[0\]\.model_path: .*vocab"):
        load_teacher(ModelSpec(str(other)), student_tokenizer, "explorer.auxiliary_models[0]")


def test_a_teacher_is_frozen_and_recorded_by_its_weights(tmp_path: Path) -> None:
    _, student_tokenizer = _tiny()
    path = _saved(tmp_path, "teacher", seed=3)
    teacher, record = load_teacher(ModelSpec(str(path)), student_tokenizer, "aux[0]")
    assert not any(p.requires_grad for p in teacher.parameters())
    assert record.model_path == str(path) and len(record.weights_sha256) == 64
    again, same = load_teacher(ModelSpec(str(path)), student_tokenizer, "aux[0]")
    assert same.weights_sha256 == record.weights_sha256
    with torch.no_grad():
        next(again.parameters()).add_(1e-3)
    assert weights_sha256(again) != record.weights_sha256
    # a resume with the recorded teacher goes on; with another one it is refused
    check_recorded(record, record.state(), version=4)
    other = TeacherRecord("aux[0]", "elsewhere", weights_sha256(again))
    with pytest.raises(ConfigError, match=r"aux\[0\]\.model_path: weight version 4 was trained"):
        check_recorded(other, record.state(), version=4)
    check_recorded(other, None, version=0)  # a fresh run has nothing recorded


def test_the_engine_scores_the_teacher_for_token_advantages() -> None:
    """fill_advantages runs the reference pass with the teacher set in the reference's place:
    the advantages are teacher minus rollout logprobs on every response token, 0 elsewhere."""
    student, tokenizer = _tiny(seed=0)
    teacher, _ = _tiny(seed=7)
    engine = TorchTrainerEngine(student, TorchTrainerConfig(lr=1e-3, micro_batch_size=2))
    engine.set_reference_model(teacher)
    rng = np.random.default_rng(0)
    batch = TrainBatch(
        prompt_ids=[[5, 6, 7], [8, 9], [10, 11, 12, 13]],
        response_ids=[[20, 21, 22], [23], [24, 25]],
        old_logprobs=[list(-rng.random(3) * 3), [-1.0], list(-rng.random(2) * 3)],
        action_mask=[[1, 1, 0], [1], [1, 1]],
        rewards=RowRewards(
            torch.tensor([0.0, 1.0, 0.0]),
            torch.tensor([0, 0, 1]),
            torch.tensor([2, 1, 2]),
        ),
    )
    spec = resolve_algorithm({"algorithm_type": "on_policy_distill"})
    teacher_lp = engine.reference_logprobs(batch)["ref_logprobs"]
    metrics = engine.train_step(batch, build_loss(spec), Advantages(spec))
    assert batch.advantages is not None
    for row in range(3):
        for j, (old, m) in enumerate(
            zip(batch.old_logprobs[row], batch.action_mask[row], strict=True)
        ):
            want = (float(teacher_lp[row, j]) - old) * m
            assert float(batch.advantages[row, j]) == pytest.approx(want, abs=1e-5)
    assert "adv/kl_mean" in metrics and metrics["skipped"] == 0.0
    # the teacher is never trained
    assert all(p.grad is None for p in teacher.parameters())


def test_the_distillation_example_loads_with_its_teacher(monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    from rft.config.loader import ConfigWarning

    monkeypatch.setenv("RFT_TEACHER_PATH", "/models/arithmetic-teacher")
    example = Path(__file__).resolve().parents[2] / "examples" / "arithmetic" / "distill.yaml"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        cfg = load_config(example)
    assert cfg.algorithm.algorithm_type == "on_policy_distill"
    assert cfg.explorer.auxiliary_models[0].model_path == "/models/arithmetic-teacher"
    assert resolve_algorithm(cfg.algorithm).uses_teacher
