"""Trinity-RFT's asynchronous GSM8K setup (explorer, trainer, and an explorer that joins later),
written in Trinity's keys, loads unchanged: the trainer from train_batch_size alone, the queue
buffer's SQL path never taken for a topic, every veRL/vLLM-only key warned about, not refused."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from rft.catalog import load_config
from rft.config import ConfigWarning
from rft.consumers.run_plan import RunPlan
from rft.consumers.trainer.trainer import token_budget

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trinity_async_gsm8k"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRINITY_MODEL_PATH", "tiny")
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(tmp_path / "gsm8k"))
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "ckpt"))


def load(name: str) -> tuple[RunPlan, list[str]]:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        cfg = load_config(EXAMPLE / name)
    return RunPlan(cfg), [str(w.message) for w in record if w.category is ConfigWarning]


def test_the_three_processes_share_one_run_and_one_experience_topic() -> None:
    explorer, _ = load("explorer.yaml")
    trainer, trainer_notes = load("trainer.yaml")
    late, _ = load("explorer_new.yaml")
    assert (explorer.cfg.mode, trainer.cfg.mode, late.cfg.mode) == ("explore", "train", "explore")
    assert explorer.run_id == trainer.run_id == late.run_id
    assert explorer.experience_topic == trainer.experience_topic == late.experience_topic
    assert explorer.experience_topic == explorer.topics.experiences  # not 'sqlite:///gsm8k.db'
    # the late explorer is a new consumer group: its own full copy of the task stream
    assert late.explorer_group != explorer.explorer_group
    assert (trainer.train_batch_size, trainer.batch_size) == (512, 64)
    assert trainer.cfg.trainer.optim.lr == pytest.approx(1e-6)  # algorithm.optimizer moved
    assert any("trainer.ulysses_sequence_parallel_size" in n for n in trainer_notes)
    # the dynamic batch keys are read: micro-batches of at most 16384 padded tokens
    assert not any("use_dynamic_bsz" in n or "max_token_len_per_gpu" in n for n in trainer_notes)
    assert token_budget(trainer.cfg) == 16384
    assert any("is not used with storage_type queue" in n for n in trainer_notes)
