"""Runs that cannot reach total_steps end at once, saying why, on the real stack.

The config loads (its taskset covers total_steps), but only part of it reaches the tasks topic:
another publish of the run put fewer tasks there first. The explorer finds the tasks used up and
says so on the control topic; the trainer, with nothing more to come and no batch, stops without
waiting out its idle timeout, exits with SHORT_EXIT_CODE and names why; `rft run` ends with the
same code and reason.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.ops.run_status import format_status, newest_statuses, read_run_status
from rft.consumers.run_plan import RunPlan
from rft.consumers.trainer.loop import SHORT_EXIT_CODE
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.producers.task_publisher import TaskPublisher, load_run_tasksets, publish_tasksets
from tests.integration.test_rft_loop import run_config

pytestmark = pytest.mark.integration

STEPS = 5
BATCH = 2
PUBLISHED = 7  # tasks that reach the topic: 3 steps of BATCH and one short batch
# the run summary's line of each component's CPU time
CPU_LINE = re.compile(
    r"CPU time: explorer (?P<explorer>\d+) s \([\d.]+ cores on average\), "
    r"trainer (?P<trainer>\d+) s"
)
HANG_GUARD_S = 300  # the processes would otherwise wait an hour (--idle-timeout 3600)


def short_run(stack: StackSettings, name: str, tmp: Path) -> tuple[Path, RunPlan]:
    raw = run_config(stack, name, tmp)
    raw["buffer"]["total_steps"] = STEPS
    raw["buffer"]["batch_size"] = BATCH
    raw["algorithm"]["repeat_times"] = 2
    config_path = tmp / "run.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    cfg = load_config(config_path)  # 16 tasks cover 5 x 2: it loads
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, plan.topics)
    fewer = load_config(  # a run of the tasks it has would load
        config_path,
        [
            f"buffer.explorer_input.taskset.generator_args.num_tasks={PUBLISHED}",
            f"buffer.total_steps={PUBLISHED // BATCH}",
        ],
    )
    with EventWriter.open(cfg.stack.kafka, transactional_id=f"{plan.run_id}.test-publisher") as w:
        w.begin()
        publish_tasksets(TaskPublisher(w), load_run_tasksets(fewer), plan.topics, epochs=1, seed=0)
        w.commit()
    return config_path, plan


def rft(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rft.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_trainer_stops_at_once_when_the_explorers_used_up_the_tasks(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config_path, plan = short_run(stack, unique, tmp_path)
    conf = ["--config", str(config_path)]
    trainer = rft("train", *conf, "--idle-timeout", "3600")
    explorer = rft("explore", *conf, "--idle-timeout", "3600", "--explorer-id", "only")
    explorer_out, _ = explorer.communicate(timeout=HANG_GUARD_S)
    trainer_out, _ = trainer.communicate(timeout=HANG_GUARD_S)
    assert explorer.returncode == 0, explorer_out[-3000:]
    assert trainer.returncode == SHORT_EXIT_CODE, trainer_out[-3000:]
    summary = json.loads(next(x for x in trainer_out.splitlines() if x.startswith('{"steps"')))
    full = PUBLISHED // BATCH
    assert summary["steps"] == full and summary["short"] is True
    assert summary["stop_reason"].startswith(f"stopped at step {full} of {STEPS}: ")
    assert f"explorer group {plan.explorer_group} used up its tasks" in summary["stop_reason"]
    # the short batch's experiences make no train batch; under `fixed` sync the explorer would
    # otherwise wait for the version that batch cannot make
    left = (PUBLISHED % BATCH) * 2
    assert (
        f"{left} of the {BATCH * 2} experiences needed for step {full + 1}"
        in (summary["stop_reason"])
    )
    assert f"rft train: {summary['stop_reason']}" in trainer_out
    statuses = {
        (s.component, s.instance): s for s in newest_statuses(stack.kafka, plan.topics.control)
    }
    ended = statuses[("explorer", "only")]
    assert (ended.state, ended.reason, ended.step, ended.tasks_left) == (
        "finished",
        "tasks_exhausted",
        full + 1,
        0,
    )
    trained = statuses[("trainer", "trainer")]
    assert (trained.state, trained.reason, trained.detail) == (
        "finished",
        "short",
        summary["stop_reason"],
    )
    shown = format_status(read_run_status(stack.kafka, plan.topics))
    assert any(
        line.startswith("  trainer trainer: finished (short)") and summary["stop_reason"] in line
        for line in shown
    ), shown


def test_rft_run_exits_short_with_the_reason(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config_path, _ = short_run(stack, unique, tmp_path)
    run = rft("run", "--config", str(config_path))
    out, _ = run.communicate(timeout=HANG_GUARD_S)
    assert run.returncode == SHORT_EXIT_CODE, out[-3000:]
    full = PUBLISHED // BATCH
    summary = out[out.index("== run summary") :]
    assert f"trainer: stopped at step {full} of {STEPS}: " in summary
    assert "used up its tasks" in summary
    assert f"'trainer': {SHORT_EXIT_CODE}, 'explorer': 0" in summary
    cpu = CPU_LINE.search(summary)  # each component's process tree, sampled by the launcher
    assert cpu is not None and float(cpu["explorer"]) > 0 and float(cpu["trainer"]) > 0, summary
