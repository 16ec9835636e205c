"""The trainer's SQL mirror on the real stack: with `experience_buffer.storage_type: sql`, every
experience the trainer reads lands once in the SQLite table, also across a resume that reads
experiences again."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import sqlalchemy as sa

from rft.config.connections import StackSettings
from rft.consumers.trainer.trainer import Trainer
from rft.events.codec import EventCodec
from rft.events.models import Experience
from tests.integration.test_rft_loop import STEPS, published_run, read_all
from tests.integration.test_trainer_resume import run_verb

pytestmark = pytest.mark.integration


def test_trainer_mirrors_each_experience_once(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config_path, cfg, plan = published_run(stack, unique, tmp_path, "trainer_driven", 1)
    run_verb("explore", config_path)
    experiences = [
        e for e in read_all(cfg, plan.experience_topic, unique + "-e") if isinstance(e, Experience)
    ]
    assert len(experiences) == STEPS * cfg.buffer.batch_size * cfg.algorithm.repeat_times

    url = f"sqlite:///{tmp_path / 'mirror' / 'exp.db'}"
    buffer = cfg.buffer.trainer_input.experience_buffer
    # the config side (accepting `sql` at load) is written elsewhere; set what it will produce
    buffer.storage_type = "sql"  # type: ignore[assignment]
    buffer.name, buffer.path = "gsm8k_buffer", url
    for total in (STEPS // 2, STEPS):  # the second trainer resumes and reads some again
        run_cfg = dataclasses.replace(
            cfg, trainer=dataclasses.replace(cfg.trainer, total_steps=total)
        )
        summary = Trainer(run_cfg, idle_timeout_s=20.0).run()
        assert summary.steps == total

    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT experience_id, reward, model_version, experience_bytes FROM gsm8k_buffer"
            )
        ).all()
    engine.dispose()
    assert sorted(r.experience_id for r in rows) == sorted(e.experience_id for e in experiences)
    by_id = {e.experience_id: e for e in experiences}
    codec = EventCodec.default()
    for row in rows:
        exp = by_id[row.experience_id]
        assert codec.decode(row.experience_bytes) == exp
        assert (row.reward, row.model_version) == (exp.reward, exp.model_version)
