"""`rft replay export | import | rescore | pairs`: the experience topic as a dataset.

Source topic: a full name, a short name (`experiences`) with --project/--name, or nothing with
--config (the run's experience buffer) or with --project/--name (their `experiences`).

Range (default: everything committed when the command starts; events written later are left
out): --from-offsets 0=120,1=80 / --from-time T, --to-offsets (exclusive) / --to-time T, where T
is milliseconds since the epoch or an ISO 8601 time (UTC unless it names a zone). Partitions an
offsets list does not name start at their oldest record and end at their last committed one.
Filters: --min-version/--max-version (model version), --explorer ID|GROUP (repeatable),
--task-id ID (repeatable), --min-reward/--max-reward; bounds are inclusive.

  export   experiences -> Parquet, JSONL or a SQL table (SQLite file by default, any SQLAlchemy
           URL), streaming; --decode-text adds the prompt and response decoded by the run's
           tokenizer (the model is loaded once to get it).
  import   a Parquet / JSONL / SQL export -> a topic (new, or --append), experiences equal field
           by field to the exported ones.
  rescore  experiences scored again by another REWARD_FUNCTIONS entry -> a new topic, each with
           `rescore.source` (topic[partition]@offset of the original) in its info. The payloads
           come from the run's task topics (--tasks-topic names others). No model is loaded.
  pairs    preference pairs -> a new topic: the best and the worst response of each rollout
           group (groups whose rewards are all equal are skipped), each pair a group of two
           experiences, for `algorithm_type: dpo` (`rft train --from-topic TARGET`).

On a terminal a progress bar shows rate and ETA; otherwise a line is printed every 10 seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from rft.cli.arguments import add_config_arguments
from rft.cli.topics_cmd import add_kafka_arguments, kafka_settings_from, run_topics
from rft.errors import ConfigError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="export, import, re-score or pair an experience topic",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="replay_action", metavar="ACTION", required=True)

    export = actions.add_parser("export", help="experiences -> Parquet / JSONL / SQL")
    _add_source(export)
    export.add_argument(
        "-o",
        "--output",
        required=True,
        help="file (.parquet, .jsonl, .db/.sqlite) or SQLAlchemy URL (sqlite:///x.db, "
        "postgresql://...)",
    )
    export.add_argument("--format", help="parquet, jsonl or sql (default: from --output)")
    export.add_argument("--table", default="experiences", help="SQL table (default experiences)")
    export.add_argument(
        "--decode-text",
        action="store_true",
        help="add prompt_decoded / response_decoded from the token ids (needs --config or "
        "--tokenizer)",
    )
    export.add_argument("--tokenizer", help="model whose tokenizer decodes (default: the config's)")
    export.add_argument("--overwrite", action="store_true", help="replace an existing output")
    export.set_defaults(func=run_export)

    imp = actions.add_parser("import", help="an export -> a topic")
    imp.add_argument("source", help="the export: file or SQLAlchemy URL")
    imp.add_argument("topic", help="target topic (full, or short with --project/--name)")
    imp.add_argument("--format", help="parquet, jsonl or sql (default: from the source)")
    imp.add_argument("--table", default="experiences", help="SQL table (default experiences)")
    imp.add_argument("--append", action="store_true", help="write into a topic that has records")
    _add_config(imp)
    add_kafka_arguments(imp)
    imp.set_defaults(func=run_import)

    rescore = actions.add_parser("rescore", help="experiences scored again -> a new topic")
    _add_source(rescore)
    rescore.add_argument(
        "--reward-fn", required=True, help="REWARD_FUNCTIONS name (e.g. accuracy_reward)"
    )
    rescore.add_argument(
        "--reward-args", default="{}", help="JSON object of its arguments, e.g. '{\"a\": 1}'"
    )
    rescore.add_argument("-o", "--output", required=True, help="target topic")
    rescore.add_argument(
        "--tasks-topic",
        action="append",
        default=[],
        help="topic holding the tasks (repeatable; default: the run's tasks and eval-tasks)",
    )
    rescore.add_argument(
        "--skip-missing-tasks",
        action="store_true",
        help="leave out experiences whose task is in no task topic (default: stop)",
    )
    rescore.add_argument("--append", action="store_true", help="write into a topic with records")
    rescore.set_defaults(func=run_rescore)

    pairs = actions.add_parser(
        "pairs", help="each group's best and worst response -> a topic of preference pairs"
    )
    _add_source(pairs)
    pairs.add_argument("-o", "--output", required=True, help="target topic")
    pairs.add_argument("--append", action="store_true", help="write into a topic with records")
    pairs.set_defaults(func=run_pairs)


def _add_config(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(
        parser, required=False, help="run config: its Kafka settings, topics and model"
    )


def _add_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", nargs="?", help="experience topic (default: the run's)")
    _add_config(parser)
    add_kafka_arguments(parser)
    add_range_arguments(parser)


def add_range_arguments(parser: argparse.ArgumentParser) -> None:
    """The range and filter options (also `rft train --from-topic`'s)."""
    where = parser.add_argument_group("range (default: all committed now)")
    where.add_argument("--from-offsets", metavar="P=O,...", help="start offset per partition")
    where.add_argument("--from-time", metavar="T", help="start at the first event at/after T")
    where.add_argument("--to-offsets", metavar="P=O,...", help="end offset per partition (excl.)")
    where.add_argument("--to-time", metavar="T", help="end before the first event at/after T")
    keep = parser.add_argument_group("filters (inclusive)")
    keep.add_argument("--min-version", type=int, help="lowest model_version kept")
    keep.add_argument("--max-version", type=int, help="highest model_version kept")
    keep.add_argument(
        "--explorer", action="append", default=[], help="explorer id or group (repeatable)"
    )
    keep.add_argument("--task-id", action="append", default=[], help="task id (repeatable)")
    keep.add_argument("--min-reward", type=float, help="lowest reward kept")
    keep.add_argument("--max-reward", type=float, help="highest reward kept")


@dataclasses.dataclass
class _Run:
    """What the arguments resolve to: Kafka settings, the run (if any) and its config."""

    kafka: Any
    topics: Any  # TopicNames or None
    cfg: Any  # RftConfig or None
    default_topic: str | None


def _resolve_run(args: argparse.Namespace) -> _Run:
    if args.config:
        from rft.catalog import load_config
        from rft.consumers.run_plan import RunPlan

        cfg = load_config(args.config, args.override, run_stage=args.stage)
        plan = RunPlan(cfg)
        kafka = cfg.stack.kafka
        if args.bootstrap:
            kafka = dataclasses.replace(kafka, bootstrap_servers=args.bootstrap)
        if args.client:
            kafka = dataclasses.replace(kafka, client=args.client)
        return _Run(kafka, plan.topics, cfg, plan.experience_topic)
    names = run_topics(args)
    return _Run(kafka_settings_from(args), names, None, names.experiences if names else None)


def _source_topic(args: argparse.Namespace, run: _Run) -> str:
    if args.topic:
        return run.topics.resolve(args.topic) if run.topics else args.topic
    if run.default_topic is None:
        raise ConfigError("name the experience topic, or give --config or --project/--name")
    return run.default_topic


def range_and_filter(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(start RangeBound, end RangeBound, ExperienceFilter) from add_range_arguments' options."""
    from rft.consumers.replay.filter import ExperienceFilter
    from rft.consumers.replay.topic_range import (
        RangeBound,
        parse_partition_offsets,
        parse_timestamp,
    )

    def bound(offsets: str | None, when: str | None, prefix: str) -> RangeBound:
        return RangeBound(
            offsets=parse_partition_offsets(offsets, f"--{prefix}-offsets") if offsets else {},
            timestamp_ms=parse_timestamp(when, f"--{prefix}-time") if when else None,
        )

    keep = ExperienceFilter(
        min_version=args.min_version,
        max_version=args.max_version,
        explorers=frozenset(args.explorer),
        task_ids=frozenset(args.task_id),
        min_reward=args.min_reward,
        max_reward=args.max_reward,
    )
    return (
        bound(args.from_offsets, args.from_time, "from"),
        bound(args.to_offsets, args.to_time, "to"),
        keep,
    )


def _say(text: str) -> None:
    print(f"rft replay: {text}", file=sys.stderr, flush=True)


def _text_decoder(args: argparse.Namespace, run: _Run) -> Any:
    from rft.consumers.run_plan import RunPlan
    from rft.engines.models import ModelSpec, load_model

    if args.tokenizer:
        spec = ModelSpec(name_or_path=args.tokenizer)
    elif run.cfg is not None:
        spec = RunPlan(run.cfg).model_spec()
    else:
        raise ConfigError("--decode-text needs --config (the run's model) or --tokenizer MODEL")
    _, tokenizer = load_model(spec)

    def decode(arrays: Any) -> list[str]:
        return list(tokenizer.batch_decode([a.tolist() for a in arrays]))

    return decode


def run_export(args: argparse.Namespace) -> int:
    from rft.consumers.replay.export import EXPORT_FORMATS, export_experiences, format_for
    from rft.consumers.replay.progress import ReplayProgress
    from rft.consumers.replay.topic_range import RangeReader

    run = _resolve_run(args)
    topic = _source_topic(args, run)
    start, end, keep = range_and_filter(args)
    name = args.format or format_for(args.output, EXPORT_FORMATS)
    writer_cls = EXPORT_FORMATS.get(name, key="--format")
    decode = _text_decoder(args, run) if args.decode_text else None
    with RangeReader.open(run.kafka, [topic], start, end) as reader:
        writer = writer_cls(
            args.output, decoded=decode is not None, overwrite=args.overwrite, table=args.table
        )
        chosen = f" where {keep.describe()}" if not keep.keeps_all else ""
        _say(f"exporting {topic} ({reader.total:,} offsets){chosen} to {writer.where}")
        with ReplayProgress(reader.total, "export") as progress:
            summary = export_experiences(reader, writer, keep, decode=decode, progress=progress)
    _say(
        f"{summary.written:,} experience(s) of {summary.events:,} event(s) written to "
        f"{writer.where} in {summary.seconds:.1f}s ({summary.rate:,.0f} events/s)"
        + (f"; {summary.other_events} other event(s) skipped" if summary.other_events else "")
        + (f"; {summary.undecodable} undecodable skipped" if summary.undecodable else "")
    )
    return 0


def run_import(args: argparse.Namespace) -> int:
    from rft.consumers.replay.export import format_for
    from rft.consumers.replay.progress import ReplayProgress
    from rft.events.writer import EventWriter
    from rft.producers.experience_import import (
        IMPORT_FORMATS,
        import_experiences,
        prepare_target_topic,
    )

    run = _resolve_run(args)
    topic = run.topics.resolve(args.topic) if run.topics else args.topic
    name = args.format or format_for(args.source, IMPORT_FORMATS)
    reader = IMPORT_FORMATS.get(name, key="--format")(args.source, table=args.table)
    try:
        prepare_target_topic(run.kafka, topic, append=args.append)
        total = reader.total_rows
        _say(f"importing {reader.where} ({total:,} rows) into {topic}")
        with (
            EventWriter.open(run.kafka) as writer,
            ReplayProgress(total, "import", unit="rows") as progress,
        ):
            summary = import_experiences(reader, writer, topic, progress=progress)
    finally:
        reader.close()
    _say(f"{summary.written:,} experience(s) written to {topic} in {summary.seconds:.1f}s")
    return 0


def run_rescore(args: argparse.Namespace) -> int:
    from rft.consumers.replay.progress import ReplayProgress
    from rft.consumers.replay.rescore import (
        Rescorer,
        TaskIndex,
        rescore_experiences,
        task_topics_for,
    )
    from rft.consumers.replay.topic_range import RangeReader
    from rft.events.writer import EventWriter
    from rft.producers.experience_import import prepare_target_topic

    try:
        reward_args = json.loads(args.reward_args)
    except ValueError as exc:
        raise ConfigError(f"--reward-args: not JSON: {exc}") from exc
    if not isinstance(reward_args, dict):
        raise ConfigError(f"--reward-args: expected a JSON object, got {args.reward_args!r}")
    run = _resolve_run(args)
    rescorer = Rescorer(args.reward_fn, reward_args)
    topic = _source_topic(args, run)
    target = run.topics.resolve(args.output) if run.topics else args.output
    if target == topic:
        raise ConfigError(f"--output {target} is the source topic: write to a new one")
    start, end, keep = range_and_filter(args)
    task_topics = args.tasks_topic or task_topics_for(topic, run.topics)
    if run.topics and args.tasks_topic:
        task_topics = [run.topics.resolve(t) for t in task_topics]
    tasks = TaskIndex.read(run.kafka, task_topics)
    _say(f"{len(tasks):,} task(s) from {', '.join(tasks.topics)}")
    prepare_target_topic(run.kafka, target, append=args.append)
    with (
        RangeReader.open(run.kafka, [topic], start, end) as reader,
        EventWriter.open(run.kafka) as writer,
    ):
        _say(f"re-scoring {topic} ({reader.total:,} offsets) with {args.reward_fn} into {target}")
        with ReplayProgress(reader.total, "rescore") as progress:
            summary = rescore_experiences(
                reader,
                tasks,
                rescorer,
                writer,
                target,
                keep,
                skip_missing_tasks=args.skip_missing_tasks,
                progress=progress,
            )
    before, after = summary.means()
    _say(
        f"{summary.written:,} experience(s) written to {target} in {summary.seconds:.1f}s; "
        f"mean reward {before:.4f} -> {after:.4f}, {summary.changed:,} changed"
        + (f"; {summary.missing_tasks} without a task skipped" if summary.missing_tasks else "")
    )
    return 0


def run_pairs(args: argparse.Namespace) -> int:
    from rft.consumers.replay.pairs import build_pairs
    from rft.consumers.replay.progress import ReplayProgress
    from rft.consumers.replay.topic_range import RangeReader
    from rft.events.writer import EventWriter
    from rft.producers.experience_import import prepare_target_topic

    run = _resolve_run(args)
    topic = _source_topic(args, run)
    target = run.topics.resolve(args.output) if run.topics else args.output
    if target == topic:
        raise ConfigError(f"--output {target} is the source topic: write to a new one")
    start, end, keep = range_and_filter(args)
    prepare_target_topic(run.kafka, target, append=args.append)
    with (
        RangeReader.open(run.kafka, [topic], start, end) as reader,
        EventWriter.open(run.kafka) as writer,
    ):
        _say(f"pairing {topic} ({reader.total:,} offsets) into {target}")
        with ReplayProgress(reader.total, "pairs") as progress:
            summary = build_pairs(reader, writer, target, keep, progress=progress)
    _say(
        f"{summary.pairs:,} pair(s) written to {target} from {summary.groups:,} complete "
        f"group(s) in {summary.seconds:.1f}s; {summary.no_spread:,} group(s) without a reward "
        "spread skipped"
        + (
            f"; {summary.incomplete_groups:,} incomplete group(s) "
            f"({summary.incomplete_experiences:,} experience(s)) at the range's end not paired"
            if summary.incomplete_groups
            else ""
        )
    )
    return 0
