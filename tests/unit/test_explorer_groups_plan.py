"""What a config says about explorer groups, decided without a broker: where a group's tasks
start (`explorer.tasks_from`), where its experiences go (`explorer.experiences_to`), how many
partitions the tasks topic gets (`explorer.max_explorers`), the task consumer's rebalancing
settings, the batch that drops a lost partition's tasks, and the trainer's rows by explorer."""

from __future__ import annotations

import dataclasses
import warnings
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.buffer.batch_metrics import batch_metrics
from rft.buffer.sampler import BatchRow, SampledBatch, SamplerCounters
from rft.catalog import load_config
from rft.config import ConfigValidationError, ConfigWarning
from rft.config.stream_start import StreamStart, parse_stream_start
from rft.consumers.run_plan import RunPlan
from rft.consumers.tasks.order import drop_revoked
from rft.errors import ConfigError
from rft.events.models import Experience, Task
from rft.events.reader import Envelope
from tests.unit.config_samples import MINIMAL


def plan(tmp_path: Path, *overrides: str) -> RunPlan:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    return RunPlan(load_config(path, list(overrides)))


def test_tasks_from_names_earliest_latest_or_a_moment(tmp_path: Path) -> None:
    assert plan(tmp_path).tasks_start == StreamStart("earliest")
    assert plan(tmp_path, "explorer.tasks_from=latest").tasks_start == StreamStart("latest")
    moment = datetime(2026, 11, 22, 17, 0, tzinfo=UTC)
    ms = int(moment.timestamp() * 1000)
    for text in ("2026-11-22T17:00:00Z", "2026-11-22T18:00:00+01:00", "2026-11-22T17:00:00"):
        start = plan(tmp_path, f"explorer.tasks_from={text}").tasks_start
        assert start == StreamStart("timestamp", ms), text
    assert plan(tmp_path, f"explorer.tasks_from={ms}").tasks_start.timestamp_ms == ms


def test_a_tasks_from_that_names_no_start_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigValidationError) as err:
        plan(tmp_path, "explorer.tasks_from=yesterday")
    assert "`explorer.tasks_from`" in str(err.value) and "'yesterday'" in str(err.value)


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)))
def test_an_iso_moment_and_its_milliseconds_name_the_same_start(moment: datetime) -> None:
    moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000, tzinfo=UTC)
    ms = (moment - datetime(1970, 1, 1, tzinfo=UTC)).days * 86_400_000 + (
        moment.hour * 3_600_000
        + moment.minute * 60_000
        + moment.second * 1000
        + moment.microsecond // 1000
    )
    assert parse_stream_start(moment.isoformat()) == parse_stream_start(str(ms))
    assert parse_stream_start(ms).timestamp_ms == ms


def test_negative_milliseconds_are_refused() -> None:
    with pytest.raises(ConfigError, match="explorer.tasks_from"):
        parse_stream_start(-5)


def test_experiences_go_to_the_trainer_a_topic_of_their_own_or_the_one_named(
    tmp_path: Path,
) -> None:
    default = plan(tmp_path)
    assert default.explorer_experience_topic == default.experience_topic == "p.n.experiences"
    assert default.feeds_trainer
    own = plan(tmp_path, "explorer.name=eval-b", "explorer.experiences_to=own")
    assert own.explorer_experience_topic == "p.n.experiences.eval-b" and not own.feeds_trainer
    named = plan(tmp_path, "explorer.experiences_to=collected.rollouts")
    assert named.explorer_experience_topic == "collected.rollouts" and not named.feeds_trainer
    # naming the trainer's topic is the same as `trainer`
    assert plan(tmp_path, "explorer.experiences_to=p.n.experiences").feeds_trainer


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (("explorer.experiences_to=a topic",), "explorer.experiences_to"),
        (("explorer.experiences_to=own", "explorer.name=eval.b"), "explorer.name"),
    ],
)
def test_an_experience_topic_kafka_cannot_have_is_refused_at_load(
    tmp_path: Path, overrides: tuple[str, ...], key: str
) -> None:
    with pytest.raises(ConfigValidationError) as err:
        plan(tmp_path, *overrides)
    assert f"`{key}`" in str(err.value)


@pytest.mark.parametrize(
    ("overrides", "tasks_partitions"),
    [
        ((), 4),  # stack.kafka.partitions
        (("explorer.max_explorers=3",), 4),
        (("explorer.max_explorers=6",), 6),
        (("explorer.rollout_model.engine_num=5",), 5),  # the ray launcher's explorers
        (("explorer.max_explorers=2", "explorer.rollout_model.engine_num=8"), 4),
        (("stack.kafka.partitions=1", "explorer.max_explorers=2"), 2),
    ],
)
def test_the_tasks_topic_gets_a_partition_for_every_configured_explorer(
    tmp_path: Path, overrides: tuple[str, ...], tasks_partitions: int
) -> None:
    p = plan(tmp_path, *overrides)
    assert p.topic_partitions == {p.topics.tasks: tasks_partitions}
    assert tasks_partitions >= p.explorer_count
    assert tasks_partitions >= p.cfg.stack.kafka.partitions


def test_an_explorer_is_a_cooperative_static_member_named_by_its_id(tmp_path: Path) -> None:
    p = plan(tmp_path)
    config = p.explorer_consumer_config("host-a")
    assert config["partition.assignment.strategy"] == "cooperative-sticky"
    assert config["group.instance.id"] == "host-a"
    assert p.explorer_consumer_config("host-b")["group.instance.id"] == "host-b"
    assert config["max.poll.interval.ms"] == p.consumer_config["max.poll.interval.ms"]


def envelope(partition: int, offset: int) -> Envelope:
    task = Task(f"t{partition}-{offset}", "s", 0, offset, {})
    return Envelope(task, "p.n.tasks", partition, offset, None, [], 0)


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50)), max_size=20, unique=True),
    st.sets(st.integers(0, 5)),
)
def test_a_batch_keeps_exactly_the_tasks_of_partitions_still_held(
    positions: list[tuple[int, int]], lost: set[int]
) -> None:
    batch = [envelope(p, o) for p, o in positions]
    kept = drop_revoked(batch, {("p.n.tasks", p) for p in lost})
    assert kept == [e for e in batch if e.partition not in lost]  # order kept, nothing else gone


def experience(explorer: str, group: str, i: int) -> Experience:
    return Experience(
        experience_id=f"{explorer}:{i}",
        task_id=f"t{i}",
        group_id=f"t{i}:{explorer}",
        group_size=1,
        explorer_id=explorer,
        explorer_group=group,
        model_version=0,
        prompt_ids=[1],
        response_ids=[2],
        logprobs=[-0.1],
    )


@given(st.lists(st.sampled_from([("a", "g1"), ("b", "g1"), ("c", "g2")]), min_size=1))
def test_trainer_metrics_count_rows_per_explorer_and_per_group(
    sources: list[tuple[str, str]],
) -> None:
    rows = [BatchRow(experience(who, group, i), None) for i, (who, group) in enumerate(sources)]
    expert = BatchRow(dataclasses.replace(experience("x", "demo", 99)), None, expert=True)
    values = batch_metrics(SampledBatch(rows + [expert], 0, SamplerCounters()), SamplerCounters())
    for who in {"a", "b", "c"}:
        expected = sum(1 for w, _ in sources if w == who)
        assert values.get(f"experiences/{who}", 0.0) == expected
    for group in {"g1", "g2"}:
        expected = sum(1 for _, g in sources if g == group)
        assert values.get(f"experiences_by_group/{group}", 0.0) == expected
    assert "experiences/x" not in values  # demonstrations come from no explorer


def test_a_shadow_explorer_in_mode_both_is_warned_about(tmp_path: Path) -> None:
    with pytest.warns(ConfigWarning, match="never feeds"):
        plan(tmp_path, "explorer.experiences_to=own")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        plan(tmp_path, "mode=explore", "explorer.experiences_to=own")
        plan(tmp_path)
