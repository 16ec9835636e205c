"""Names and shapes of a run's topics: `<project>.<name>.<topic>`, and idempotent creation.

`TopicNames.for_run(project, name)` gives every topic of a run; `ensure_topics` creates the
missing ones with the partitions, replication and retention of `KafkaSettings`. The `weights` and
`control` topics get one partition: their events are ordered facts every reader must see in order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

from rft.config.connections import KafkaSettings
from rft.errors import ConfigError
from rft.events.transport import TopicSpec, kafka_backend

# Kafka's legal topic characters; dots separate the namespace parts, so they are not allowed
# inside a project or run name.
_NAME_PART = re.compile(r"^[A-Za-z0-9_-]+$")
_MAX_TOPIC_LENGTH = 249

SINGLE_PARTITION_TOPICS = frozenset({"weights", "control"})


@dataclass(frozen=True)
class TopicNames:
    """The full topic names of one run."""

    tasks: str
    eval_tasks: str
    experiences: str
    weights: str
    control: str
    metrics: str
    dead_letter: str

    @classmethod
    def for_run(cls, project: str, name: str) -> TopicNames:
        """`<project>.<name>.<topic>` for every topic; ConfigError names a bad project or name."""
        for key, value in (("project", project), ("name", name)):
            if not isinstance(value, str) or not _NAME_PART.match(value):
                raise ConfigError(
                    f"{key}: {value!r} cannot be part of a Kafka topic name "
                    "(use letters, digits, '_' and '-')"
                )
        prefix = f"{project}.{name}"
        names = {f.name: f"{prefix}.{short_name(f.name)}" for f in fields(cls)}
        longest = max(names.values(), key=len)
        if len(longest) > _MAX_TOPIC_LENGTH:
            raise ConfigError(
                f"project/name: topic {longest!r} is longer than Kafka's {_MAX_TOPIC_LENGTH} "
                "characters"
            )
        return cls(**names)

    def all(self) -> list[str]:
        return [getattr(self, f.name) for f in fields(self)]

    def by_short_name(self) -> dict[str, str]:
        """`{"tasks": ..., "eval-tasks": ..., "dead-letter": ...}`."""
        return {short_name(f.name): getattr(self, f.name) for f in fields(self)}

    def resolve(self, topic: str) -> str:
        """The full name for a short one (`tasks`, `eval-tasks`, `eval_tasks`); others unchanged."""
        return self.by_short_name().get(topic.replace("_", "-"), topic)


def short_name(attribute: str) -> str:
    """`eval_tasks` -> `eval-tasks`: the topic suffix of a TopicNames attribute."""
    return attribute.replace("_", "-")


def topic_spec(
    topic: str,
    settings: KafkaSettings,
    configs: Mapping[str, str] | None = None,
    partitions: int | None = None,
) -> TopicSpec:
    """How `topic` is created under `settings`: single-partition kinds get one partition, others
    `partitions` when given (a run's plan sizes its tasks topic for its explorers), else
    `settings.partitions`."""
    suffix = topic.rsplit(".", 1)[-1]
    if suffix in SINGLE_PARTITION_TOPICS:
        partitions = 1
    elif partitions is None:
        partitions = settings.partitions
    if partitions < 1:
        raise ConfigError(f"stack.kafka.partitions: must be >= 1, got {settings.partitions}")
    if settings.replication_factor < 1:
        raise ConfigError(
            f"stack.kafka.replication_factor: must be >= 1, got {settings.replication_factor}"
        )
    merged = {"retention.ms": str(settings.retention_ms), **(configs or {})}
    return TopicSpec(topic, partitions, settings.replication_factor, merged)


def ensure_topics(
    settings: KafkaSettings,
    topics: TopicNames | Iterable[str],
    *,
    configs: Mapping[str, str] | None = None,
    partitions: Mapping[str, int] | None = None,
    timeout_s: float = 30.0,
) -> list[str]:
    """Create whichever of `topics` do not exist; return the names created (none on a rerun).

    `partitions` gives some topics a partition count of their own. Existing topics are left as
    they are, even when their shape differs from the settings.
    """
    names = topics.all() if isinstance(topics, TopicNames) else list(topics)
    sized = partitions or {}
    specs = [topic_spec(t, settings, configs, sized.get(t)) for t in names]
    with kafka_backend(settings).admin() as admin:
        return admin.create_topics(specs, timeout_s=timeout_s)
