"""A restarted explorer continues at the step it had committed (the step rides in the task
offsets' commit metadata, inside the step's transaction) and explores only the tasks left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rft.config.connections import StackSettings
from rft.events.models import Experience
from rft.events.reader import EventReader
from tests.integration.test_rft_loop import STEPS, published_run, read_all
from tests.integration.test_trainer_resume import run_verb

pytestmark = pytest.mark.integration


@pytest.mark.faults  # a kill and a restart: in `make test-faults`, out of the default suite's 30 min
@pytest.mark.slow
def test_restarted_explorer_continues_its_step_count(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    # trainer_driven: the explorer never waits for weights, so it runs alone here
    config_path, cfg, plan = published_run(stack, unique, tmp_path, "trainer_driven", 1)
    half = STEPS // 2
    first, _ = run_verb("explore", config_path, f"buffer.total_steps={half}")
    second, second_log = run_verb("explore", config_path)

    s1, s2 = (json.loads(out.strip().splitlines()[-1]) for out in (first, second))
    per_step = cfg.buffer.batch_size * cfg.algorithm.repeat_times
    assert (s1["resumed_from"], s1["steps"]) == (0, half)
    assert (s2["resumed_from"], s2["steps"]) == (half, STEPS)
    assert s2["experiences"] == per_step * (STEPS - half)  # only the steps left
    assert f"resuming at step {half} of {STEPS}" in second_log

    experiences = [
        e for e in read_all(cfg, plan.experience_topic, unique + "-e") if isinstance(e, Experience)
    ]
    tasks = {e.task_id for e in experiences}
    assert len(experiences) == per_step * STEPS and len(tasks) == cfg.buffer.batch_size * STEPS

    with EventReader.open(cfg.stack.kafka, plan.explorer_group, [plan.topics.tasks]) as reader:
        steps = {json.loads(o.metadata)["step"] for o in reader.committed()}
    assert max(steps) == STEPS
