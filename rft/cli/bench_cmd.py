"""`rft bench --config X.yaml [--versions 3,5,7]`: evaluate a run's checkpoint versions, no training.

`rft run` does the same for a config with `mode: bench`. Without `--versions`, the versions are
version 0 (the base model) and every verified one in the checkpoint store, or only the newest
with `explorer.bench_on_latest_checkpoint: true`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rft.cli.explore_cmd import add_run_args

if TYPE_CHECKING:
    from rft.config import RftConfig


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench", help="evaluate checkpoint versions on the eval tasksets (no training)"
    )
    add_run_args(parser)
    parser.add_argument(
        "--versions",
        type=parse_versions,
        default=None,
        metavar="V1,V2,...",
        help="versions to evaluate (0 is the base model); default: all, or the newest with "
        "explorer.bench_on_latest_checkpoint",
    )
    parser.set_defaults(func=run)


def parse_versions(text: str) -> list[int]:
    """`3,5,7` -> [3, 5, 7]; each a whole number >= 0."""
    try:
        versions = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated version numbers, got {text!r}"
        ) from exc
    if not versions or min(versions) < 0:
        raise argparse.ArgumentTypeError(f"expected version numbers >= 0, got {text!r}")
    return versions


def run(args: argparse.Namespace) -> int:
    from rft.catalog import load_config

    cfg = load_config(args.config, args.override, run_stage=args.stage)
    return run_bench(cfg, args, getattr(args, "versions", None))


def run_bench(cfg: RftConfig, args: argparse.Namespace, versions: list[int] | None) -> int:
    """Bring the local stack up if the config points at it, bench, print the table."""
    from pathlib import Path

    from rft.cli.explore_cmd import start_tracing
    from rft.consumers.ops.bench import Bench
    from rft.supervisor.run_supervisor import RunSupervisor

    bench = Bench(cfg, versions=versions)
    RunSupervisor(cfg, Path(args.config), list(args.override)).ensure_stack()
    start_tracing("bench", cfg)
    report = bench.run()
    print(report.table(), flush=True)
    return 1 if report.refused else 0
