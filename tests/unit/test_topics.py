"""Topic naming and shaping: `<project>.<name>.<topic>`, validation, short names, partitions."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.config.connections import KafkaSettings
from rft.errors import ConfigError
from rft.events.topics import TopicNames, topic_spec

name_parts = st.from_regex(r"\A[A-Za-z0-9_-]{1,40}\Z")


def test_names_follow_the_namespace() -> None:
    names = TopicNames.for_run("math", "grpo-1")
    assert names.tasks == "math.grpo-1.tasks"
    assert names.eval_tasks == "math.grpo-1.eval-tasks"
    assert names.experiences == "math.grpo-1.experiences"
    assert names.weights == "math.grpo-1.weights"
    assert names.control == "math.grpo-1.control"
    assert names.metrics == "math.grpo-1.metrics"
    assert names.dead_letter == "math.grpo-1.dead-letter"
    assert len(set(names.all())) == 7


@given(project=name_parts, name=name_parts)
def test_every_name_is_a_legal_distinct_kafka_topic(project: str, name: str) -> None:
    names = TopicNames.for_run(project, name)
    for topic in names.all():
        assert re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic)
        assert topic.startswith(f"{project}.{name}.")
        assert topic.count(".") == 2
    assert len(set(names.all())) == len(names.all())


@given(project=name_parts, name=name_parts)
def test_short_names_resolve_and_others_pass_through(project: str, name: str) -> None:
    names = TopicNames.for_run(project, name)
    assert names.resolve("tasks") == names.tasks
    assert names.resolve("eval-tasks") == names.eval_tasks
    assert names.resolve("eval_tasks") == names.eval_tasks
    assert names.resolve("dead-letter") == names.dead_letter
    assert names.resolve("other.topic") == "other.topic"


@pytest.mark.parametrize(
    ("project", "name", "key"),
    [
        ("a.b", "run", "project"),
        ("proj", "run/1", "name"),
        ("", "run", "project"),
        ("p", "", "name"),
    ],
)
def test_bad_parts_name_the_config_key(project: str, name: str, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}: "):
        TopicNames.for_run(project, name)


def test_too_long_names_are_refused() -> None:
    with pytest.raises(ConfigError, match="longer than"):
        TopicNames.for_run("p" * 200, "n" * 60)


def test_specs_take_settings_and_keep_ordered_topics_in_one_partition() -> None:
    settings = KafkaSettings(partitions=6, replication_factor=1, retention_ms=86_400_000)
    names = TopicNames.for_run("p", "n")
    experiences = topic_spec(names.experiences, settings)
    assert (experiences.partitions, experiences.replication_factor) == (6, 1)
    assert experiences.configs == {"retention.ms": "86400000"}
    assert topic_spec(names.weights, settings).partitions == 1
    assert topic_spec(names.control, settings).partitions == 1
    assert topic_spec(names.tasks, settings, {"cleanup.policy": "compact"}).configs == {
        "retention.ms": "86400000",
        "cleanup.policy": "compact",
    }


def test_bad_partition_settings_name_the_key() -> None:
    with pytest.raises(ConfigError, match="stack.kafka.partitions"):
        topic_spec("p.n.tasks", KafkaSettings(partitions=0))
    with pytest.raises(ConfigError, match="stack.kafka.replication_factor"):
        topic_spec("p.n.tasks", KafkaSettings(replication_factor=0))
