"""`rft run --config X.yaml`: the whole job, or one side of it, as the config's `mode` says.

mode both: bring the local stack up if needed, publish the tasksets, run the explorer and trainer
as separate processes and print progress and a summary. mode explore / train: run that side only,
in this process (Trinity-RFT's split setup: two configs differing only in `mode`). mode bench:
evaluate the run's checkpoint versions on its eval tasksets and print a table (`rft bench`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rft.cli.explore_cmd import add_run_args


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("run", help="run a config: stack, publish, explore and train")
    add_run_args(parser)
    parser.add_argument(
        "--republish", action="store_true", help="publish the tasksets even if published before"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rft.config import load_config

    cfg = load_config(args.config, args.override)
    if cfg.mode == "explore":
        from rft.cli import explore_cmd

        args.explorer_id, args.idle_timeout = None, 60.0
        return explore_cmd.run(args)
    if cfg.mode == "train":
        from rft.cli import train_cmd

        args.idle_timeout = None
        return train_cmd.run(args)
    if cfg.mode == "bench":
        from rft.cli import bench_cmd

        return bench_cmd.run_bench(cfg, args, versions=None)
    import signal

    from rft.supervisor.run_supervisor import RunSupervisor

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # SIGTERM (and SIGINT, even where a shell started us with it ignored) stop the children too
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    summary = RunSupervisor(cfg, Path(args.config), list(args.override)).run(args.republish)
    print("\n== run summary")
    for line in summary.lines():
        print(line)
    failed = {k: v for k, v in summary.exit_codes.items() if v not in (0, None)}
    return 1 if failed else 0
