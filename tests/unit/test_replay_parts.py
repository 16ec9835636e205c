"""Replay's pure parts: experience filters, range arguments, progress lines, format choice."""

from __future__ import annotations

import io

import numpy as np
import pytest

from rft.consumers.replay.export import EXPORT_FORMATS, format_for
from rft.consumers.replay.filter import ExperienceFilter
from rft.consumers.replay.progress import ReplayProgress, format_eta
from rft.consumers.replay.rescore import task_topics_for
from rft.consumers.replay.topic_range import parse_partition_offsets, parse_timestamp
from rft.errors import ConfigError
from rft.events.models import Experience
from rft.events.topics import TopicNames
from rft.producers.experience_import import IMPORT_FORMATS


def exp(
    version: int = 3, reward: float = 0.5, explorer: str = "x1", task: str = "t1"
) -> Experience:
    return Experience(
        experience_id="e",
        task_id=task,
        group_id="g",
        group_size=1,
        explorer_id=explorer,
        explorer_group="p.n.explorer.main",
        model_version=version,
        prompt_ids=[1],
        response_ids=[2],
        logprobs=[-0.1],
        reward=reward,
    )


def test_filter_bounds_are_inclusive_and_unset_bounds_keep_everything() -> None:
    assert ExperienceFilter().accepts(exp()) and ExperienceFilter().keeps_all
    versions = ExperienceFilter(min_version=2, max_version=4)
    assert [versions.accepts(exp(version=v)) for v in range(1, 6)] == [
        False,
        True,
        True,
        True,
        False,
    ]
    rewards = ExperienceFilter(min_reward=0.0, max_reward=1.0)
    assert [rewards.accepts(exp(reward=r)) for r in (-0.1, 0.0, 1.0, 1.1, float("nan"))] == [
        False,
        True,
        True,
        False,
        False,
    ]
    assert ExperienceFilter(max_reward=1.0).accepts(exp(reward=-5.0))


def test_filter_matches_explorer_id_or_group_and_task_ids() -> None:
    by_id = ExperienceFilter(explorers=frozenset({"x2"}))
    assert not by_id.accepts(exp(explorer="x1")) and by_id.accepts(exp(explorer="x2"))
    assert ExperienceFilter(explorers=frozenset({"p.n.explorer.main"})).accepts(exp())
    tasks = ExperienceFilter(task_ids=frozenset({"t2", "t3"}))
    assert [tasks.accepts(exp(task=t)) for t in ("t1", "t2", "t3")] == [False, True, True]
    assert "version [2, inf]" in ExperienceFilter(min_version=2).describe()


def test_filter_refuses_an_empty_range() -> None:
    with pytest.raises(ConfigError, match="--min-version 5 is above --max-version 4"):
        ExperienceFilter(min_version=5, max_version=4)


def test_range_arguments_parse_or_name_the_option() -> None:
    assert parse_partition_offsets("0=120, 3=7", "--from-offsets") == {0: 120, 3: 7}
    for bad in ("0:120", "a=1", "0=-1", "0="):
        with pytest.raises(ConfigError, match="--from-offsets"):
            parse_partition_offsets(bad, "--from-offsets")
    assert parse_timestamp("1700000000123", "--to-time") == 1_700_000_000_123
    assert parse_timestamp("2026-03-01T12:00:00", "--to-time") == 1_772_366_400_000
    assert parse_timestamp("2026-03-01T13:00:00+01:00", "--to-time") == 1_772_366_400_000
    with pytest.raises(ConfigError, match="--to-time: 'yesterday'"):
        parse_timestamp("yesterday", "--to-time")


def test_formats_follow_the_destination() -> None:
    assert format_for("out/x.parquet", EXPORT_FORMATS) == "parquet"
    assert format_for("x.JSONL", EXPORT_FORMATS) == "jsonl"
    assert format_for("x.db", EXPORT_FORMATS) == "sql"
    assert format_for("postgresql://u@h/db", EXPORT_FORMATS) == "sql"
    assert format_for("x.sqlite", IMPORT_FORMATS) == "sql"
    with pytest.raises(ConfigError, match="give --format"):
        format_for("x.csv", EXPORT_FORMATS)


def test_task_topics_come_from_the_run_or_the_topic_name() -> None:
    run = TopicNames.for_run("proj", "r1")
    assert task_topics_for("anything", run) == [run.tasks, run.eval_tasks]
    assert task_topics_for("proj.r1.experiences") == ["proj.r1.tasks", "proj.r1.eval-tasks"]
    assert task_topics_for("my-topic") == []


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_prints_periodic_plain_lines_off_a_terminal() -> None:
    out, clock = io.StringIO(), Clock()
    progress = ReplayProgress(1000, "export", stream=out, interval_s=10, clock=clock)
    clock.now = 5
    progress.update(100)
    assert out.getvalue() == ""  # not yet: one line per interval
    clock.now = 10
    progress.update(250)
    assert out.getvalue() == "export: 250 / 1,000 offsets (25%), 25/s, ETA 0:00:30\n"
    clock.now = 40
    progress.update(1000)
    progress.close()
    assert (
        out.getvalue().splitlines()[-1] == "export: 1,000 / 1,000 offsets (100%), 25/s, ETA 0:00:00"
    )


def test_eta_formats() -> None:
    assert format_eta(3725) == "1:02:05"
    assert format_eta(float("inf")) == "?"
    assert format_eta(float(np.nan)) == "?"
