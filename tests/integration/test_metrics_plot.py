"""`rft metrics plot` as a user runs it: PNGs from the run's metrics topic on the real broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rft.config.connections import StackSettings
from rft.events.models import Metric
from rft.events.topics import TopicNames, ensure_topics
from rft.events.writer import EventWriter

pytestmark = pytest.mark.integration
pytest.importorskip("matplotlib")


def test_plot_writes_the_figures_the_metrics_topic_has_data_for(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    names = TopicNames.for_run(unique, "run")
    ensure_topics(stack.kafka, names)
    with EventWriter.open(stack.kafka) as writer:
        for step in range(1, 5):
            writer.send(
                names.metrics,
                Metric(
                    "explorer", f"{unique}.run", step, {"tasks": 4.0, "reward_mean": 0.1 * step}
                ),
                key="explorer",
            )
            writer.send(
                names.metrics,
                Metric("trainer", f"{unique}.run", step, {"step_time_s": 2.0, "wait_time_s": 0.5}),
                key="trainer",
            )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rft.cli.main",
            "metrics",
            "plot",
            "--project",
            unique,
            "--name",
            "run",
            "--bootstrap",
            stack.kafka.bootstrap_servers,
            "-o",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert f"16 value(s) read from {names.metrics}" in done.stderr
    written = sorted(Path(p).name for p in done.stdout.split())
    assert written == ["reward.png", "trainer_step_time.png"]
    assert all((tmp_path / n).read_bytes()[:4] == b"\x89PNG" for n in written)
    assert "no data for eval_accuracy.png, staleness.png, rollout_throughput.png" in done.stderr
