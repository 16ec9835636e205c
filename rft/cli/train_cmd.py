"""`rft train --config X.yaml`: run the trainer process (experiences -> weight versions).

Started by a launcher as one rank of a sharded trainer (WORLD_SIZE > 1, with RANK, MASTER_ADDR,
MASTER_PORT in the environment), it runs that rank: rank 0 the trainer loop, the others serve it.

With `--from-topic T` it trains offline: from a range of an existing experience topic (this run's
short name or any full topic name, another run's included), with no explorer, the config's
algorithm and sampler, and the same range and filter options as `rft replay`. It checkpoints and
resumes like an online trainer, publishes into the config's run, and ends when the range is read.

An algorithm that trains on a dataset (sft, cpt, dpo) trains the same way, without --from-topic, on
the dataset `rft publish` put on the run's own experience topic (docs/sft.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

from rft.cli.explore_cmd import add_run_args, start_tracing, stop_on_signals
from rft.cli.replay_cmd import add_range_arguments, range_and_filter
from rft.errors import ConfigError


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
    parser.add_argument(
        "--from-topic",
        metavar="TOPIC",
        help="train offline from this experience topic (short name of this run, or a full "
        "name), no explorer; ends when the range below is read",
    )
    add_range_arguments(parser)
    parser.set_defaults(func=run)


def offline_source(args: argparse.Namespace, cfg: Any) -> Any:
    """The OfflineSource that --from-topic and the range options name, or None without it."""
    from rft.consumers.run_plan import RunPlan
    from rft.consumers.trainer.offline_input import OfflineSource

    if hasattr(args, "from_offsets"):  # `rft run` (mode train) has no such options
        start, end, keep = range_and_filter(args)
        if args.from_topic:
            topic = RunPlan(cfg).topics.resolve(args.from_topic)
            return OfflineSource(topic, start, end, keep)
        if not (start.open and end.open and keep.keeps_all):
            raise ConfigError("range and filter options need --from-topic")
    if trains_on_dataset(cfg):
        # the published dataset is a bounded range of the run's own topic: trained to its end
        return OfflineSource(RunPlan(cfg).experience_topic)
    return None


def trains_on_dataset(cfg: Any) -> bool:
    """Whether the config's algorithm trains on a published dataset (its preset's trait)."""
    from rft.catalog.run_length import dataset_algorithm

    return dataset_algorithm(cfg) is not None


def run(args: argparse.Namespace) -> int:
    from rft.catalog import load_config
    from rft.consumers.run_plan import PLACED_DEVICE_ENV
    from rft.consumers.trainer.trainer import Trainer

    cfg = load_config(
        args.config,
        args.override,
        trains_offline=bool(getattr(args, "from_topic", None)),
        run_stage=args.stage,
    )
    offline = offline_source(args, cfg)
    start_tracing("trainer", cfg)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:  # one rank of a sharded trainer, started by a launcher (Ray)
        from rft.consumers.trainer.ranks import run_trainer_rank

        ranked = run_trainer_rank(
            cfg,
            int(os.environ["RANK"]),
            world_size,
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            os.environ.get(PLACED_DEVICE_ENV, "cpu"),
            stop=stop_on_signals(),
            idle_timeout_s=args.idle_timeout,
            offline=offline,
        )
        if ranked is None:  # ranks 1..N-1 serve rank 0's engine, which reports the summary
            return 0
        summary = ranked
    else:
        summary = Trainer(cfg, idle_timeout_s=args.idle_timeout, offline=offline).run(
            stop_on_signals()
        )
    if offline is not None:
        label = (
            f"rft train --from-topic {offline.topic}"
            if getattr(args, "from_topic", None)
            else f"rft train (the dataset on {offline.topic})"
        )
        print(offline_summary_line(label, summary), file=sys.stderr, flush=True)
    print(
        json.dumps(
            {
                "steps": summary.steps,
                "experiences": summary.experiences,
                "dropped_stale": summary.dropped_stale,
                "published_versions": summary.published_versions,
                "read": summary.read,
                "filtered": summary.filtered,
                "left_untrained": summary.left_incomplete + summary.left_untrained,
                "input_ended": summary.input_ended,
                "stop_reason": summary.stop_reason,
                "short": summary.short,
                "median_step_s": statistics.median(summary.step_seconds)
                if summary.step_seconds
                else None,
            }
        )
    )
    if summary.short:
        from rft.consumers.trainer.loop import SHORT_EXIT_CODE

        print(f"rft train: {summary.stop_reason}", file=sys.stderr, flush=True)
        return SHORT_EXIT_CODE
    return 0


def offline_summary_line(label: str, summary: Any) -> str:
    """One line on how an offline run ended and what it trained, after `label`."""
    how = "range read to its end" if summary.input_ended else "range not read to its end"
    how += f", stopped by {summary.stop_reason}"
    left = summary.left_incomplete + summary.left_untrained
    versions = summary.published_versions
    return (
        f"{label}: {how}; {summary.experiences} experience(s) trained in "
        f"{summary.steps} step(s) (this process read {summary.read}, filtered out "
        f"{summary.filtered}); {left} left untrained (fewer than a batch, or incomplete groups)"
        + (f"; published versions {versions[0]}..{versions[-1]}" if versions else "")
    )
