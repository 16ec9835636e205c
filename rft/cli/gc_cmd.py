"""`rft gc --config X.yaml [--ttl 24h] [--dry-run]`: remove the run's orphaned checkpoint
directories (files without a manifest: crashed or abandoned writes) older than the TTL.

Versions with a manifest are never touched here; `trainer.max_checkpoints_to_keep` is what
retires those, in the trainer. `--dry-run` lists what would be removed and removes nothing.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from rft.cli.arguments import add_config_arguments

DEFAULT_TTL = "24h"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "gc",
        help="remove orphaned checkpoint directories (no manifest) older than a TTL",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(parser)
    parser.add_argument(
        "--ttl",
        default=DEFAULT_TTL,
        help=f"only orphans whose newest file is older than this (90s, 30m, 24h, 7d; "
        f"default {DEFAULT_TTL}): younger ones may be a write in progress",
    )
    parser.add_argument("--dry-run", action="store_true", help="list, remove nothing")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from consumers.run_plan import RunPlan
    from rft.config import load_config
    from rft.storage.checkpoint_gc import collect_orphans, parse_duration

    ttl_s = parse_duration(args.ttl)
    cfg = load_config(args.config, args.override)
    store = RunPlan(cfg).checkpoint_store()
    now = time.time()
    collected, kept = collect_orphans(store, ttl_s, dry_run=args.dry_run, now=now)
    verb = "would remove" if args.dry_run else "removed"
    for orphan in collected:
        age_h = (now - orphan.newest_write) / 3600
        print(
            f"{verb} {orphan.uri}: {orphan.files} file(s), {orphan.size} bytes, "
            f"newest written {age_h:.1f} h ago"
        )
    for orphan in kept:
        print(f"kept {orphan.uri}: newest file younger than --ttl {args.ttl}")
    print(
        f"{verb} {len(collected)} orphaned version director{'y' if len(collected) == 1 else 'ies'}"
        f" ({sum(o.size for o in collected)} bytes) of {store}; kept {len(kept)} younger than "
        f"{args.ttl}"
    )
    return 0
