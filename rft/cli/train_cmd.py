"""`rft train --config X.yaml`: run the trainer process (experiences -> weight versions).

Started by a launcher as one rank of a sharded trainer (WORLD_SIZE > 1, with RANK, MASTER_ADDR,
MASTER_PORT in the environment), it runs that rank: rank 0 the trainer loop, the others serve it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Any

from rft.cli.explore_cmd import add_run_args, start_tracing, stop_on_signals


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("train", help="run the trainer: experiences -> weights")
    add_run_args(parser)
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        help="stop after this many seconds without experiences "
        "(default: buffer.trainer_input.experience_buffer.max_read_timeout)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from consumers.run_plan import PLACED_DEVICE_ENV
    from consumers.trainer import Trainer
    from rft.config import load_config

    cfg = load_config(args.config, args.override)
    start_tracing("trainer", cfg)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:  # one rank of a sharded trainer, started by a launcher (Ray)
        from consumers.trainer_ranks import run_trainer_rank

        ranked = run_trainer_rank(
            cfg,
            int(os.environ["RANK"]),
            world_size,
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            os.environ.get(PLACED_DEVICE_ENV, "cpu"),
            stop=stop_on_signals(),
            idle_timeout_s=args.idle_timeout,
        )
        if ranked is None:  # ranks 1..N-1 serve rank 0's engine, which reports the summary
            return 0
        summary = ranked
    else:
        summary = Trainer(cfg, idle_timeout_s=args.idle_timeout).run(stop_on_signals())
    print(
        json.dumps(
            {
                "steps": summary.steps,
                "experiences": summary.experiences,
                "dropped_stale": summary.dropped_stale,
                "published_versions": summary.published_versions,
                "median_step_s": statistics.median(summary.step_seconds)
                if summary.step_seconds
                else None,
            }
        )
    )
    return 0
