"""`rft status --config X.yaml` (or --project P --name N): where a run stands, from Kafka and the
checkpoint store.

Prints the run's topics with their end offsets, each consumer group of the run with its lag per
partition, the trainer's newest version (announced on the weights topic, and in the checkpoint
store), each live explorer with the model version of its newest experience and its committed
step, the newest explorer step metric, the dead letters by error, and (with a config) where its
traces are seen (`monitor.trace_exporter`: the Zipkin UI's address, the spans file). `--json`
emits the same as one JSON object. With a config that has `stages:` (and no --stage) it first
lists the stages (finished ones with their last version, the one running now) and then shows the
running stage's run. Reads only: it joins no group that any component uses and commits nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from rft.cli.arguments import add_config_arguments
from rft.cli.topics_cmd import add_kafka_arguments, kafka_settings_from, run_topics
from rft.errors import ConfigError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status",
        help="a run's topics, consumer lag, versions, explorers and dead letters",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(parser, required=False)
    add_kafka_arguments(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")
    parser.add_argument(
        "--all-explorers", action="store_true", help="list explorers that are gone as well"
    )
    parser.add_argument(
        "--tail",
        type=int,
        default=500,
        help="offsets read from the end of each experience / metrics partition (default 500)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rft.consumers.ops.run_status import format_status, read_run_status
    from rft.storage.checkpoint_store import CheckpointStore
    from rft.storage.object_store import open_object_store

    pipeline_lines: list[str] = []
    if args.config:
        from rft.catalog import load_config
        from rft.config.loader import StagedConfigError
        from rft.consumers.run_plan import RunPlan

        try:
            cfg = load_config(args.config, args.override, run_stage=args.stage)
        except StagedConfigError:
            pipeline_lines, cfg = pipeline_status(args)
        plan = RunPlan(cfg)
        kafka = cfg.stack.kafka
        if args.bootstrap:
            kafka = dataclasses.replace(kafka, bootstrap_servers=args.bootstrap)
        topics, experience_topic, store = (
            plan.topics,
            plan.experience_topic,
            plan.checkpoint_store(),
        )
    else:
        from rft.config.connections import ObjectStoreSettings

        topics = run_topics(args)
        if topics is None:
            raise ConfigError("give --config, or --project and --name")
        kafka, experience_topic = kafka_settings_from(args), None
        settings = ObjectStoreSettings()
        store = CheckpointStore(
            open_object_store(settings.uri or settings, settings), args.project, args.name
        )
    status = read_run_status(
        kafka, topics, experience_topic, checkpoint_store=store, tail=args.tail
    )
    traces = None
    if args.config:
        from rft.tracing.setup import trace_viewer

        traces = trace_viewer(cfg)
    if args.json:
        extra = {"traces": traces, **({"pipeline": pipeline_lines} if pipeline_lines else {})}
        print(json.dumps({**json.loads(status.to_json()), **extra}, indent=2))
    else:
        print("\n".join(pipeline_lines + format_status(status, all_explorers=args.all_explorers)))
        if traces:
            print(f"traces: {traces}")
    return 0


def pipeline_status(args: argparse.Namespace) -> tuple[list[str], Any]:
    """A config with `stages:` and no --stage: a line per stage (finished ones with their last
    version), and the config of the stage that runs now (the last one when all finished), whose
    status follows."""
    from rft.catalog import load_pipeline
    from rft.supervisor.stage_pipeline import StagePipeline

    stages = [(stage, cfg) for stage, cfg in load_pipeline(args.config, args.override) if stage]
    pipeline = StagePipeline(stages)
    lines, current = pipeline.status_lines()
    cfg = current.cfg if current is not None else stages[-1][1]
    lines.append(f"status of run {cfg.project}.{cfg.name}:")
    return lines, cfg
