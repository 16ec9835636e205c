"""`rft train --config X.yaml`: run the trainer process (experiences -> weight versions)."""

from __future__ import annotations

import argparse
import json
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
    from consumers.trainer import Trainer
    from rft.config import load_config

    cfg = load_config(args.config, args.override)
    start_tracing("trainer")
    trainer = Trainer(cfg, idle_timeout_s=args.idle_timeout)
    summary = trainer.run(stop_on_signals())
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
