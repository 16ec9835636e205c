"""`rft metrics follow --config X.yaml`: feed the config's metric sinks from the run's metrics topic.

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

from rft.cli.explore_cmd import add_run_args, stop_on_signals


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


def run_follow(args: argparse.Namespace) -> int:
    from consumers.metric_follower import MetricFollower, default_follower, follower_group
    from consumers.metric_sinks import MetricFanout
    from consumers.run_plan import RunPlan
    from rft.config import load_config

    cfg = load_config(args.config, args.override)
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
