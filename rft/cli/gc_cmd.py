"""`rft gc --config X.yaml [--ttl 24h] [--dry-run]`: remove the run's orphaned checkpoint
directories (files without a manifest: crashed or abandoned writes), and the stray files inside
committed versions that their manifests do not list (another write's upload of the same version,
killed or beaten to the manifest), older than the TTL.

No file a manifest lists is touched here; `trainer.max_checkpoints_to_keep` is what retires
versions, in the trainer. `--dry-run` lists what would be removed and removes nothing.
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
        help="remove orphaned checkpoint directories (no manifest) and stray files in committed "
        "versions, older than a TTL",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(parser)
    parser.add_argument(
        "--ttl",
        default=DEFAULT_TTL,
        help=f"only orphans and strays whose newest file is older than this (90s, 30m, 24h, 7d; "
        f"default {DEFAULT_TTL}): younger ones may be a write in progress",
    )
    parser.add_argument("--dry-run", action="store_true", help="list, remove nothing")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rft.catalog import load_config
    from rft.consumers.run_plan import RunPlan
    from rft.storage.checkpoint_gc import collect_orphans, collect_strays, parse_duration

    ttl_s = parse_duration(args.ttl)
    cfg = load_config(args.config, args.override, run_stage=args.stage)
    store = RunPlan(cfg).checkpoint_store()
    now = time.time()
    collected, kept = collect_orphans(store, ttl_s, dry_run=args.dry_run, now=now)
    strays, young = collect_strays(store, ttl_s, dry_run=args.dry_run, now=now)
    verb = "would remove" if args.dry_run else "removed"
    for leftover in [*collected, *strays]:
        age_h = (now - leftover.newest_write) / 3600
        print(
            f"{verb} {leftover.uri}: {leftover.what}, {leftover.size} bytes, "
            f"newest written {age_h:.1f} h ago"
        )
    for leftover in [*kept, *young]:
        print(f"kept {leftover.uri}: {leftover.what}, newest younger than --ttl {args.ttl}")
    print(
        f"{verb} {len(collected)} orphaned version director{'y' if len(collected) == 1 else 'ies'}"
        f" ({sum(o.size for o in collected)} bytes) of {store}; kept {len(kept)} younger than "
        f"{args.ttl}"
    )
    print(
        f"{verb} {sum(s.files for s in strays)} stray file(s) ({sum(s.size for s in strays)} "
        f"bytes) in committed versions; kept {sum(s.files for s in young)} younger than "
        f"{args.ttl}"
    )
    return 0
