"""`rft metrics follow --config X.yaml`: feed the config's metric sinks from the run's metrics topic.
`rft metrics plot --config X.yaml [--config Y.yaml ...]`: PNGs of runs' metrics, overlaid.

Runs until interrupted (Ctrl-C / SIGTERM: what was written is flushed and committed), or with
--until-idle S until S seconds pass without a new event. Each follower is a consumer group of its
own and commits only what its sinks flushed, so a follower restarted under the same name resumes
without writing rows twice. The default name derives from the sinks and their destinations
(`monitor.monitor_type`, `monitor.monitor_args`, the job directory): followers of one config share
a group and split the metrics rather than write each row twice into the same files; give
--follower NAME to run another one that sees every metric.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rft.cli.arguments import add_override_argument
from rft.cli.explore_cmd import add_run_args, stop_on_signals
from rft.cli.topics_cmd import add_kafka_arguments, kafka_settings_from, run_topics
from rft.errors import ConfigError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "metrics",
        help="feed the configured metric sinks from a run's metrics topic",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="metrics_action", metavar="ACTION", required=True)
    follow = actions.add_parser(
        "follow",
        help="write the run's metrics to monitor.monitor_type's sinks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_args(follow)
    follow.add_argument(
        "--from-beginning",
        action="store_true",
        help="a new follower starts at the run's first metric (default: at new ones); "
        "a follower that has committed before always resumes where it stopped",
    )
    follow.add_argument(
        "--until-idle",
        type=float,
        metavar="SECONDS",
        help="stop after this many seconds without a new event",
    )
    follow.add_argument(
        "--follower",
        help="name of this follower, i.e. its consumer group (default: from the sinks' settings)",
    )
    follow.set_defaults(func=run_follow)

    plot = actions.add_parser(
        "plot",
        help="write PNGs of runs' metrics (reward, eval accuracy, staleness, throughput, "
        "step time)",
        description=PLOT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    plot.add_argument(
        "--config", action="append", default=[], help="run config (repeat to overlay runs)"
    )
    add_override_argument(plot)
    add_kafka_arguments(plot)
    plot.add_argument(
        "-o",
        "--out",
        help="directory for the PNGs (default: the job directory's monitor/plots for one config, "
        "else ./rft-plots)",
    )
    plot.set_defaults(func=run_plot)


PLOT_HELP = """Reads each run's metrics topic from its start to now (a bounded read that commits
nothing) and writes reward.png, eval_accuracy.png (against step and wall time), staleness.png,
rollout_throughput.png and trainer_step_time.png, one colour per run. Runs are named by
--config (repeatable) or by --project P --name N. Needs matplotlib (pip install matplotlib)."""


def run_follow(args: argparse.Namespace) -> int:
    from rft.catalog import load_config
    from rft.consumers.metrics.follower import MetricFollower, default_follower, follower_group
    from rft.consumers.metrics.sinks import MetricFanout
    from rft.consumers.run_plan import RunPlan

    cfg = load_config(args.config, args.override, run_stage=args.stage)
    plan = RunPlan(cfg)
    group = follower_group(plan.run_id, args.follower or default_follower(cfg))
    stop = stop_on_signals()
    with MetricFanout.for_config(cfg) as sinks:
        print(
            f"rft metrics: following {plan.topics.metrics} as group {group} into "
            f"{', '.join(sinks.names) or 'no sinks'}",
            file=sys.stderr,
            flush=True,
        )
        follower = MetricFollower(
            cfg.stack.kafka,
            plan.topics.metrics,
            group,
            sinks,
            from_beginning=args.from_beginning,
            dead_letter_topic=plan.topics.dead_letter,
        )
        summary = follower.run(stop, until_idle_s=args.until_idle)
    parked = f", {summary.parked} undecodable parked" if summary.parked else ""
    print(
        f"rft metrics: {summary.written} metric(s) written, {summary.skipped} other event(s) "
        f"skipped{parked}",
        file=sys.stderr,
    )
    return 0


def run_plot(args: argparse.Namespace) -> int:
    from pathlib import Path

    try:
        from rft.consumers.metrics.plots import write_plots
    except ModuleNotFoundError as exc:
        if exc.name != "matplotlib":
            raise
        raise ConfigError("rft metrics plot needs matplotlib: pip install matplotlib") from None
    from rft.consumers.metrics.series import read_metric_series

    runs = []  # (kafka settings, metrics topic, run id)
    out_default = Path("rft-plots")
    if args.config:
        from rft.catalog import load_config
        from rft.consumers.run_plan import RunPlan

        for path in args.config:
            cfg = load_config(path, args.override)
            plan = RunPlan(cfg)
            runs.append((cfg.stack.kafka, plan.topics.metrics, plan.run_id))
            if len(args.config) == 1:
                out_default = cfg.job_dir / "monitor" / "plots"
    names = run_topics(args)
    if names is not None:
        runs.append((kafka_settings_from(args), names.metrics, f"{args.project}.{args.name}"))
    if not runs:
        raise ConfigError("name the runs: --config X.yaml (repeatable) or --project P --name N")
    series = []
    for kafka, topic, run in runs:
        got = read_metric_series(kafka, topic, run)
        count = sum(len(points) for points in got.series.values())
        print(f"rft metrics: {count} value(s) read from {topic}", file=sys.stderr, flush=True)
        series.append(got)
    out = Path(args.out) if args.out else out_default
    written, skipped = write_plots(series, out)
    for path in written:
        print(path)
    if skipped:
        print(f"rft metrics: no data for {', '.join(skipped)}", file=sys.stderr)
    return 0 if written else 1
