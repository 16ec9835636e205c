"""A restarted trainer resumes from its newest checkpoint (weights, optimizer state, step and the
manifest's consumed offsets, not its group's committed offsets) and trains exactly the experiences
it had not trained: none twice, none skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rft.config.connections import StackSettings
from rft.consumers.trainer.loop import SHORT_EXIT_CODE
from rft.events.reader import EventReader
from tests.integration.test_rft_loop import STEPS, published_run

pytestmark = pytest.mark.integration


def run_verb(verb: str, config: Path, *overrides: str, code: int = 0) -> tuple[str, str]:
    """(stdout, stderr) of an `rft` verb that must exit with `code`; stdout ends with its JSON
    summary."""
    argv = [sys.executable, "-m", "rft.cli.main", verb, "--config", str(config)]
    for item in overrides:
        argv += ["--override", item]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == code, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, done.stderr


def test_trainer_resumes_from_manifest_offsets(stack: StackSettings, unique: str, tmp_path: Path):
    # trainer_driven: the explorer never waits, so it can finish before the trainer starts
    config_path, cfg, plan = published_run(stack, unique, tmp_path, "trainer_driven", 1)
    run_verb("explore", config_path)
    per_step = cfg.buffer.batch_size * cfg.algorithm.repeat_times

    first = run_verb("train", config_path, f"trainer.total_steps={STEPS // 2}")
    # Move the trainer group's own committed offsets to the end of the topic: a restart that
    # trusted them would find nothing to train, so the count below proves it used the manifest.
    with EventReader.open(cfg.stack.kafka, plan.trainer_group, [plan.experience_topic]) as group:
        quiet = 0
        while quiet < 2:  # two empty polls after joining: the group has read to the end
            got = group.poll(500, timeout_s=2.0)
            quiet = quiet + 1 if not got and group.assignment() else 0
        group.commit()
        at_end = sum(o.offset for o in group.committed())
    trained_to = sum(
        o.offset for o in plan.checkpoint_store().read_manifest(STEPS // 2).consumed_offsets
    )
    assert at_end > trained_to  # the group is past experiences the first run never trained
    store = plan.checkpoint_store()
    half = store.read_manifest(STEPS // 2)  # read now: the second run prunes old versions
    second = run_verb(
        "train", config_path, f"trainer.total_steps={STEPS}", "trainer.max_checkpoints_to_keep=2"
    )
    assert store.list_versions() == [STEPS - 1, STEPS]  # max_checkpoints_to_keep pruned the rest

    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in (first, second)]
    assert summaries[0]["experiences"] == per_step * (STEPS // 2)
    assert summaries[1]["experiences"] == per_step * (STEPS - STEPS // 2)  # only the rest
    assert (
        f"resumed from checkpoint v{STEPS // 2} (train step {STEPS // 2}, weights and optimizer"
        in second[1]
    )

    full = store.read_manifest(STEPS)
    # offsets count transaction markers too, so compare positions, not event counts
    before = {(o.topic, o.partition): o.offset for o in half.consumed_offsets}
    after = {(o.topic, o.partition): o.offset for o in full.consumed_offsets}
    assert before and all(after[tp] >= offset for tp, offset in before.items())
    assert sum(after.values()) > sum(before.values())
    assert full.parent_version is not None and full.parent_version >= STEPS // 2

    # continue_from_checkpoint: false starts from step 0 and ignores the checkpoints: it reads from
    # its group's committed offsets (at the end), finds nothing, and stops short: the explorer
    # announced that it ran its steps, so nothing more can come
    fresh_out, fresh_err = run_verb(
        "train",
        config_path,
        "continue_from_checkpoint=false",
        "buffer.trainer_input.experience_buffer.max_read_timeout=600",
        code=SHORT_EXIT_CODE,
    )
    fresh = json.loads(fresh_out.strip().splitlines()[-1])
    assert fresh["steps"] == 0 and fresh["experiences"] == 0 and fresh["short"]
    assert f"ran their {STEPS} steps" in fresh["stop_reason"]
    assert "resumed from checkpoint" not in fresh_err
