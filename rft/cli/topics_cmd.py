"""`rft topics list | describe | create`: the run's Kafka topics.

`create --project P --name N` makes every topic of a run (`P.N.tasks`, ...) with the partitions,
replication and retention of the Kafka settings; creating is idempotent. Short names such as
`tasks` resolve against --project/--name.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from rft.errors import ConfigError


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """--bootstrap / --client / --project / --name, shared by `topics` and `tail`."""
    parser.add_argument(
        "--bootstrap",
        "--bootstrap-servers",
        dest="bootstrap",
        help="Kafka bootstrap servers (default: $RFT_KAFKA_BOOTSTRAP or the local stack)",
    )
    parser.add_argument(
        "--client",
        default=None,
        help="Kafka client library: confluent (default) or kafka-python",
    )
    parser.add_argument("--project", help="run project: short topic names resolve to P.N.topic")
    parser.add_argument("--name", help="run name")


def kafka_settings_from(args: argparse.Namespace) -> Any:
    from rft.config.connections import KafkaSettings

    settings = KafkaSettings()
    if args.bootstrap:
        settings = dataclasses.replace(settings, bootstrap_servers=args.bootstrap)
    if args.client:
        settings = dataclasses.replace(settings, client=args.client)
    return settings


def run_topics(args: argparse.Namespace) -> Any:
    from rft.events.topics import TopicNames

    if bool(args.project) != bool(args.name):
        raise ConfigError("give both --project and --name (or neither)")
    return TopicNames.for_run(args.project, args.name) if args.project else None


def resolve_topics(args: argparse.Namespace, topics: list[str]) -> list[str]:
    names = run_topics(args)
    return [names.resolve(t) for t in topics] if names else list(topics)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("topics", help="list, describe or create Kafka topics")
    actions = parser.add_subparsers(dest="topics_action", metavar="ACTION", required=True)
    common = argparse.ArgumentParser(add_help=False)
    add_kafka_arguments(common)

    listing = actions.add_parser("list", parents=[common], help="topic names (of the run)")
    listing.set_defaults(func=_list)

    describe = actions.add_parser("describe", parents=[common], help="partitions and configs")
    describe.add_argument("topics", nargs="*", help="topics (default: every topic of the run)")
    describe.set_defaults(func=_describe)

    create = actions.add_parser("create", parents=[common], help="create missing topics")
    create.add_argument("topics", nargs="*", help="topics (default: every topic of the run)")
    create.add_argument("--partitions", type=int, help="partitions (default: settings, 4)")
    create.add_argument("--replication-factor", type=int, help="replicas (default 1)")
    create.add_argument("--retention-ms", type=int, help="retention (default -1: forever)")
    create.set_defaults(func=_create)


def _topics_or_run(args: argparse.Namespace) -> list[str]:
    if args.topics:
        return resolve_topics(args, args.topics)
    names = run_topics(args)
    if names is None:
        raise ConfigError("name topics, or give --project and --name for every topic of a run")
    return names.all()


def _list(args: argparse.Namespace) -> int:
    from rft.events.transport import kafka_backend

    names = run_topics(args)
    with kafka_backend(kafka_settings_from(args)).admin() as admin:
        topics = admin.list_topics()
    prefix = f"{args.project}.{args.name}." if names else ""
    for topic in topics:
        if topic.startswith(prefix):
            print(topic)
    return 0


def _describe(args: argparse.Namespace) -> int:
    from rft.events.transport import kafka_backend

    topics = _topics_or_run(args)
    with kafka_backend(kafka_settings_from(args)).admin() as admin:
        infos = admin.describe_topics(topics)
    for info in infos:
        configs = " ".join(f"{k}={v}" for k, v in sorted(info.configs.items()))
        print(
            f"{info.name}  partitions={len(info.partitions)} "
            f"replication={info.replication_factor} {configs}".rstrip()
        )
        for p in info.partitions:
            print(f"  [{p.partition}] leader={p.leader} replicas={p.replicas} isr={p.isr}")
    return 0


def _create(args: argparse.Namespace) -> int:
    from rft.events.topics import ensure_topics

    settings = kafka_settings_from(args)
    changes = {
        "partitions": args.partitions,
        "replication_factor": args.replication_factor,
        "retention_ms": args.retention_ms,
    }
    settings = dataclasses.replace(settings, **{k: v for k, v in changes.items() if v is not None})
    topics = _topics_or_run(args)
    created = set(ensure_topics(settings, topics))
    for topic in topics:
        print(f"{topic}  {'created' if topic in created else 'exists'}")
    return 0
