"""`rft feed --config X.yaml`: the task feeder of a training taskset with an online selector.

It publishes the taskset's tasks batch by batch as the selector chooses them from the rewards on
the experience topic (rft.consumers.tasks.feeder), and ends when the run's tasks are all published.
A restarted feeder resumes exactly where its last committed batch left off. `rft run` starts it
beside the explorer and trainer when the config's selector is online.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rft.cli.explore_cmd import add_run_args, start_tracing, stop_on_signals
from rft.errors import ConfigError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "feed", help="publish an online task selector's tasks batch by batch, from rewards"
    )
    add_run_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rft.catalog import load_config
    from rft.consumers.tasks.feeder import TaskFeeder
    from rft.producers.taskset_reader import load_taskset

    cfg = load_config(args.config, args.override, run_stage=args.stage)
    start_tracing("feeder", cfg)
    taskset = cfg.buffer.explorer_input.taskset
    if taskset is None:
        raise ConfigError("buffer.explorer_input.taskset: rft feed needs a training taskset")
    feeder = TaskFeeder(cfg, load_taskset(taskset))
    summary = feeder.run(stop_on_signals())
    print(
        json.dumps(
            {
                "taskset": taskset.name,
                "rounds": summary.rounds,
                "published": summary.published,
                "resumed_rounds": summary.resumed_rounds,
                "observed_rewards": summary.observed,
            }
        )
    )
    return 0
