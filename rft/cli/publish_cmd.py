"""`rft publish`: put a taskset's rows on the tasks topic as Task events.

Two forms: `rft publish PATH` for one JSONL/Parquet file or Hugging Face dataset directory, and
`rft publish --config RUN.yaml` for every taskset of a run (train taskset for `total_epochs`,
eval tasksets once). Everything is read and checked before anything is sent.
For a run whose algorithm trains on a dataset (sft, cpt, dpo), `--config` publishes that dataset
(`buffer.trainer_input.experience_buffer`, storage_type file) instead: each row rendered with
the model's tokenizer and chat template, as Experience events on the run's experience topic.
Exit status: 0 all published; 1 error (with "fail", any bad row: nothing published);
3 published, but some rows were skipped as bad (listed on stderr).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from rft.cli.arguments import add_config_arguments
from rft.errors import ConfigError

EXIT_SKIPPED_ROWS = 3


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "publish",
        help="publish taskset rows as Task events",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("path", nargs="?", help="JSONL / Parquet file or HF dataset directory")
    add_config_arguments(parser, required=False, help="run config YAML: publish its tasksets")
    target = parser.add_argument_group("where (PATH form)")
    target.add_argument("--project", help="run project (topics <project>.<name>.tasks)")
    target.add_argument("--name", help="run name")
    target.add_argument("--topic", help="an explicit topic instead of --project/--name")
    target.add_argument("--bootstrap-servers", help="Kafka bootstrap (default: the local stack)")
    rows = parser.add_argument_group("taskset (PATH form)")
    rows.add_argument("--taskset-name", help="taskset name in task ids (default: file stem)")
    rows.add_argument("--split", default="train")
    rows.add_argument("--subset-name")
    rows.add_argument("--prompt-key", default="prompt")
    rows.add_argument("--response-key", default="response")
    rows.add_argument("--system-prompt")
    rows.add_argument("--system-prompt-key")
    rows.add_argument("--workflow", help="workflow name (default: math_workflow)")
    rows.add_argument("--reward-fn", help="reward function name (default: the workflow's)")
    rows.add_argument("--repeat-times", type=int, default=1)
    rows.add_argument("--eval", action="store_true", help="an eval taskset: eval-tasks topic")
    rows.add_argument("--epochs", type=int, help="epochs (default 1, or buffer.total_epochs)")
    parser.add_argument("--seed", type=int, default=42, help="shuffle seed (epoch e: seed + e)")
    parser.add_argument(
        "--on-bad-rows",
        choices=("fail", "skip-and-report"),
        default="fail",
        help="fail: publish nothing if any row is bad; skip-and-report: publish the rest",
    )
    parser.add_argument("--dry-run", action="store_true", help="read and check only")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # heavy imports stay out of `rft --help`
    from rft.cli.explore_cmd import start_tracing
    from rft.config.connections import KafkaSettings
    from rft.contact.first_contact import require_kafka
    from rft.events.topics import TopicNames, ensure_topics
    from rft.producers.task_publisher import load_run_tasksets, publish_atomically
    from rft.producers.taskset_reader import load_taskset

    if bool(args.path) == bool(args.config):
        raise ConfigError("give a taskset PATH or --config RUN.yaml (one of the two)")
    config = None
    if args.config:
        from rft.catalog import load_config
        from rft.cli.train_cmd import trains_on_dataset

        config = load_config(args.config, args.override, run_stage=args.stage)
        if trains_on_dataset(config):
            if args.bootstrap_servers:
                config.stack.kafka.bootstrap_servers = args.bootstrap_servers
            return publish_run_dataset(
                config,
                epochs=args.epochs,
                seed=args.seed,
                on_bad_rows=args.on_bad_rows,
                dry_run=args.dry_run,
            )
        kafka = config.stack.kafka
        topics = TopicNames.for_run(config.project, config.name)
        epochs = args.epochs or config.buffer.total_epochs
        tasksets = load_run_tasksets(config, on_bad_rows=args.on_bad_rows)
        topic_names = [topics.tasks, topics.eval_tasks]
        from rft.consumers.run_plan import RunPlan

        partitions = RunPlan(config).topic_partitions
    else:
        kafka = KafkaSettings()
        topics, topic_names = _path_topics(args, TopicNames)
        loaded = load_taskset(
            _taskset_config(args), is_eval=args.eval, on_bad_rows=args.on_bad_rows
        )
        tasksets = [loaded]
        epochs = args.epochs or 1
        partitions = {}
    if args.bootstrap_servers:
        kafka.bootstrap_servers = args.bootstrap_servers
    if epochs < 1:
        raise ConfigError(f"--epochs must be >= 1, got {epochs}")

    for taskset in tasksets:
        for bad in taskset.bad_rows:
            print(f"rft publish: skipped bad row {bad}", file=sys.stderr)
    if args.dry_run:
        for taskset in tasksets:
            print(f"{taskset.name}: {len(taskset.rows)} valid rows, {len(taskset.bad_rows)} bad")
        return EXIT_SKIPPED_ROWS if any(t.bad_rows for t in tasksets) else 0

    start_tracing("publisher", config)
    require_kafka(kafka)  # a config error in seconds, not an outage (first_contact.py)
    ensure_topics(kafka, topic_names, partitions=partitions)
    summary = publish_atomically(
        kafka,
        tasksets,
        topics,
        epochs=epochs,
        seed=args.seed,
        transactional_id=f"rft-publish.{'.'.join(topic_names)}",
    )
    for line in summary.lines():
        if "skipped bad row" not in line:
            print(line)
    return EXIT_SKIPPED_ROWS if summary.bad_row_count else 0


def _taskset_config(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from rft.config.schema import FormatConfig, TasksetConfig

    path = Path(args.path)
    return TasksetConfig(
        name=args.taskset_name or path.stem or path.name,
        path=str(path),
        split=args.split,
        subset_name=args.subset_name,
        format=FormatConfig(
            prompt_key=args.prompt_key,
            response_key=args.response_key,
            system_prompt=args.system_prompt,
            system_prompt_key=args.system_prompt_key,
        ),
        repeat_times=args.repeat_times,
        default_workflow_type=args.workflow,
        default_reward_fn_type=args.reward_fn,
    )


def _path_topics(args: argparse.Namespace, topic_names: Any) -> tuple[Any, list[str]]:
    """TopicNames for --project/--name, or one whose tasks and eval-tasks are --topic."""
    if args.topic:
        if args.project or args.name:
            raise ConfigError("give --topic or --project/--name, not both")
        same = {f.name: args.topic for f in dataclasses.fields(topic_names)}
        return topic_names(**same), [args.topic]
    if not (args.project and args.name):
        raise ConfigError("give --project and --name (topic <project>.<name>.tasks) or --topic")
    topics = topic_names.for_run(args.project, args.name)
    return topics, [topics.eval_tasks if args.eval else topics.tasks]


def publish_run_dataset(
    config: Any,
    *,
    epochs: int | None,
    seed: int,
    on_bad_rows: str,
    dry_run: bool = False,
    trace: bool = True,
) -> int:
    """The run's dataset rendered and published to its experience topic (see the docstring).
    `trace`: set up this process's tracing as the publisher's (not when the process goes on to
    train, which sets it up as the trainer's)."""
    from rft.algorithms.presets import resolve_algorithm
    from rft.buffer.sft_rows import RenderContext
    from rft.cli.explore_cmd import start_tracing
    from rft.consumers.run_plan import RunPlan
    from rft.contact.first_contact import require_kafka
    from rft.engines.chat_template import configured_chat_template
    from rft.engines.models import load_tokenizer
    from rft.producers.dataset_publisher import publish_dataset, render_dataset

    plan = RunPlan(config)
    buffer = config.buffer.trainer_input.experience_buffer
    model = config.model
    renderer = resolve_algorithm(config.algorithm, check_repeat_times=False).dataset
    if renderer is None:
        raise ConfigError(
            f"algorithm.algorithm_type: {config.algorithm.algorithm_type!r} trains on rollouts; "
            "it has no dataset to publish"
        )
    context = RenderContext(
        tokenizer=load_tokenizer(plan.model_spec()),
        max_prompt_tokens=model.max_prompt_tokens,
        max_response_tokens=model.max_response_tokens,
        chat_template=buffer.format.chat_template
        or configured_chat_template(model.custom_chat_template, model.chat_template_path),
    )
    dataset = render_dataset(buffer, renderer, context, on_bad_rows=on_bad_rows)
    for bad in dataset.bad_rows:
        print(f"rft publish: skipped bad row {bad}", file=sys.stderr)
    if dry_run:
        print(
            f"{dataset.name}: {len(dataset.rows)} valid rows ({dataset.sequences} sequences, "
            f"{dataset.truncated} cut), {len(dataset.bad_rows)} bad"
        )
        return EXIT_SKIPPED_ROWS if dataset.bad_rows else 0
    if trace:
        start_tracing("publisher", config)
    require_kafka(config.stack.kafka)
    plan.ensure_topics(plan.experience_topic)
    summary = publish_dataset(
        config.stack.kafka,
        dataset,
        plan.experience_topic,
        epochs=epochs or config.buffer.total_epochs,
        seed=seed,
        transactional_id=f"rft-publish.{plan.experience_topic}",
    )
    for line in summary.lines():
        if "skipped bad row" not in line:
            print(line)
    return EXIT_SKIPPED_ROWS if summary.bad_rows else 0
