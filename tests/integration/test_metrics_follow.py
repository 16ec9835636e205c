"""Metrics reach the configured sinks whatever the mode, against the real broker:
`rft metrics follow` (a subprocess, as a user runs it) and the follower that `rft run` keeps beside
the trainer of a split setup. Files are read back with their own readers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rft.catalog import load_config
from rft.config import RftConfig
from rft.config.connections import StackSettings
from rft.consumers.metrics.follower import BackgroundMetricFollower
from rft.consumers.run_plan import RunPlan
from rft.consumers.trainer.loop import SHORT_EXIT_CODE
from rft.events.models import Metric
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.producers.metric_emitter import MetricEmitter
from tests.unit.config_samples import MINIMAL

pytestmark = pytest.mark.integration


def write_config(stack: StackSettings, unique: str, tmp_path: Path, **extra: object) -> Path:
    raw = yaml.safe_load(MINIMAL)
    raw.update(
        project=unique,
        name="mon",
        checkpoint_root_dir=str(tmp_path / "ckpt"),
        monitor={"monitor_type": ["jsonl", "tensorboard"]},
        stack={
            "kafka": {"bootstrap_servers": stack.kafka.bootstrap_servers},
            "object_store": {"endpoint": stack.object_store.endpoint, "bucket": "rft-it"},
        },
    )
    raw.update(extra)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def emit(cfg: RftConfig, metrics: list[tuple[str, int, dict[str, float]]]) -> list[Metric]:
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, [plan.topics.metrics])
    sent = []
    with EventWriter.open(cfg.stack.kafka) as writer:
        emitters: dict[str, MetricEmitter] = {}
        for component, step, values in metrics:
            if component not in emitters:
                emitters[component] = MetricEmitter(
                    writer, plan.topics.metrics, component, plan.run_id
                )
            sent.append(emitters[component].emit(step, values))
    return sent


def follow(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "rft.cli.main", "metrics", "follow", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return done


def jsonl_rows(path: Path) -> list[tuple[str, int, dict[str, float]]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r["component"], r["step"], r["values"]) for r in rows]


def tensorboard_points(log_dir: Path) -> set[tuple[str, int, float, float]]:
    points = set()
    for run_dir in log_dir.iterdir():
        acc = EventAccumulator(str(run_dir))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            points |= {(tag, e.step, e.wall_time, e.value) for e in acc.Scalars(tag)}
    return points


def expected_points(metrics: list[Metric]) -> set[tuple[str, int, float, float]]:
    return {
        (f"{m.component}/{k}", m.step, m.timestamp / 1000, float(np.float32(v)))
        for m in metrics
        for k, v in m.values.items()
    }


def by_component(metrics: list[Metric]) -> list[tuple[str, int, dict[str, float]]]:
    # one key per component, so the topic keeps each component's order, not the interleaving
    return sorted(((m.component, m.step, m.values) for m in metrics), key=lambda r: r[0])


def test_follow_writes_jsonl_and_tensorboard_and_resumes_without_duplicates(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config = write_config(stack, unique, tmp_path)
    cfg = load_config(config)
    monitor = cfg.job_dir / "monitor"
    first = emit(
        cfg,
        [
            ("explorer", 1, {"reward_mean": 0.25, "accuracy": 0.5}),
            ("trainer", 1, {"loss": 1.5, "grad_norm": 0.75}),
            ("explorer", 2, {"reward_mean": 0.5, "accuracy": 0.625}),
            ("trainer", 2, {"loss": 1.25, "grad_norm": 0.5}),
        ],
    )
    with EventWriter.open(cfg.stack.kafka) as writer:  # a poison record is parked, not fatal
        writer.send_raw(RunPlan(cfg).topics.metrics, b"\x00junk", key=b"explorer")
    done = follow(config, "--from-beginning", "--until-idle", "3")
    assert "4 metric(s) written" in done.stderr
    assert "1 undecodable parked" in done.stderr
    assert sorted(jsonl_rows(monitor / "metrics.jsonl"), key=lambda r: r[0]) == by_component(first)
    assert tensorboard_points(monitor / "tensorboard") == expected_points(first)

    # the same follower again: it resumes after what it wrote
    second = emit(cfg, [("explorer", 3, {"reward_mean": 0.75}), ("trainer", 3, {"loss": 1.0})])
    done = follow(config, "--from-beginning", "--until-idle", "3")
    assert "2 metric(s) written" in done.stderr
    assert sorted(jsonl_rows(monitor / "metrics.jsonl"), key=lambda r: r[0]) == by_component(
        first + second
    )
    assert tensorboard_points(monitor / "tensorboard") == expected_points(first + second)
    assert sorted(
        e.step for e in _scalars(monitor / "tensorboard" / "trainer", "trainer/loss")
    ) == [
        1,
        2,
        3,
    ]

    # a follower with other destinations is another group: it sees every metric
    other = tmp_path / "other.jsonl"
    done = follow(
        config,
        "--override",
        "monitor.monitor_type=jsonl",
        "--override",
        f"monitor.monitor_args={{path: '{other}'}}",
        "--from-beginning",
        "--until-idle",
        "3",
    )
    assert "6 metric(s) written" in done.stderr
    assert sorted(jsonl_rows(other), key=lambda r: r[0]) == by_component(first + second)


def _scalars(run_dir: Path, tag: str) -> list:
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return acc.Scalars(tag)


def test_background_follower_writes_only_its_component_and_resumes(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    cfg = load_config(write_config(stack, unique, tmp_path))
    path = cfg.job_dir / "monitor" / "metrics.jsonl"
    with BackgroundMetricFollower.for_component(cfg, "trainer") as follower:
        sent = emit(
            cfg,
            [("explorer", s, {"reward_mean": s / 10}) for s in range(1, 4)]
            + [("trainer", s, {"loss": 2.0 - s / 10}) for s in range(1, 4)],
        )
    assert follower.error is None
    trainer = [m for m in sent if m.component == "trainer"]
    assert jsonl_rows(path) == [(m.component, m.step, m.values) for m in trainer]

    # a restarted trainer process: its follower resumes the component's group
    with BackgroundMetricFollower.for_component(cfg, "trainer") as follower:
        later = emit(cfg, [("trainer", 4, {"loss": 1.5}), ("explorer", 4, {"reward_mean": 0.4})])
    assert follower.error is None
    assert jsonl_rows(path) == [
        (m.component, m.step, m.values) for m in trainer + later if m.component == "trainer"
    ]


def test_rft_run_in_mode_train_feeds_the_sinks(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    """A split setup's trainer process (`rft run`, mode train) writes the trainer's metrics; the
    trainer finds no experiences and stops short after its read timeout (exit code
    SHORT_EXIT_CODE), so the metrics come from an earlier trainer of the run."""
    config = write_config(
        stack,
        unique,
        tmp_path,
        mode="train",
        monitor={"monitor_type": "jsonl"},
    )
    raw = yaml.safe_load(config.read_text())
    raw["buffer"]["total_steps"] = 2
    raw["buffer"]["trainer_input"] = {"experience_buffer": {"max_read_timeout": 2}}
    config.write_text(yaml.safe_dump(raw))
    cfg = load_config(config)
    sent = emit(cfg, [("trainer", 1, {"loss": 0.5}), ("explorer", 1, {"reward_mean": 0.5})])
    done = subprocess.run(
        [sys.executable, "-m", "rft.cli.main", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == SHORT_EXIT_CODE, done.stderr[-3000:]
    assert jsonl_rows(cfg.job_dir / "monitor" / "metrics.jsonl") == [
        (m.component, m.step, m.values) for m in sent if m.component == "trainer"
    ]
