"""A pipeline `stages: [sft, grpo]` killed (SIGKILL, `rft run` and its children) in its GRPO stage,
then run again: the SFT stage is not run again (no version written or announced again, its dataset
not published again), and the GRPO stage resumes as a single run resumes: its trainer from its
newest version, its tasks not published again, and the run checker finds its log whole (no
experience trained twice or lost, every version verified, the explorers' versions honest)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rft.config.connections import StackSettings
from rft.consumers.ops.run_check import RunChecker
from rft.supervisor.process_group import descendants
from tests.integration.test_sft_run import announced, published
from tests.integration.test_stages_run import (
    ROWS,
    SFT_BATCH,
    progress_of,
    rft,
    stage_plans,
    staged_config,
)

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.slow]

GRPO_STEPS = 6


def test_a_pipeline_killed_in_its_second_stage_resumes_it_and_skips_the_first(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    name = f"{unique}-stage-kill"
    config = staged_config(stack, name, tmp_path, grpo_steps=GRPO_STEPS)
    sft, grpo = stage_plans(config)
    progress = progress_of(sft, name)
    sft_last = ROWS // SFT_BATCH

    argv = [sys.executable, "-m", "rft.cli.main", "run", "--config", str(config)]
    victim = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 400
        while grpo.checkpoint_store().latest_version() < 1 and time.monotonic() < deadline:
            assert victim.poll() is None, "the pipeline ended before it could be killed"
            time.sleep(0.1)
    finally:
        # the whole tree at once: `rft run` and the explorer and trainer it started (each in a
        # session of its own)
        tree = [victim_proc := psutil.Process(victim.pid), *descendants(victim_proc)]
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        victim.wait()
        psutil.wait_procs(tree, timeout=30)
    killed_at = grpo.checkpoint_store().latest_version()
    assert 1 <= killed_at < GRPO_STEPS, "the GRPO stage was not caught mid-run"
    assert progress.finished(0, "sft") is not None
    assert progress.finished(1, "grpo") is None
    sft_versions = sft.checkpoint_store().list_versions()
    assert sft_versions == list(range(1, sft_last + 1))

    done = rft("run", "--config", str(config))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert (
        f"stage 1/2 'sft': finished earlier (run rft-it.{name}-sft, last version v{sft_last})"
        in out
    )
    assert "stage 1/2 'sft': running" not in out
    assert f"{grpo.topics.tasks} holds the tasks an earlier run published; resuming" in out
    assert f"stage 2/2 'grpo': finished: last version v{GRPO_STEPS}" in out

    # the first stage was not rerun
    assert sft.checkpoint_store().list_versions() == sft_versions
    assert [v.version for v in announced(stack, sft.topics.weights)] == sft_versions
    assert len(published(stack, sft.experience_topic)) == ROWS
    # the second resumed from where it was killed, and its log is whole
    log = (grpo.cfg.job_dir / "logs" / "trainer.log").read_text(errors="replace")
    assert f"resumed from checkpoint v{killed_at}" in log
    report = RunChecker.of_plan(grpo).check()
    assert report.ok, "\n".join(report.table())
    assert report.facts["experiences trained"] == 2 * 4 * GRPO_STEPS
    record = progress.finished(1, "grpo")
    assert record is not None and record.last_version == GRPO_STEPS
