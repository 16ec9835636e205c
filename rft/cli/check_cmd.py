"""`rft check --config X.yaml`: read a run's whole log and checkpoint store, count anomalies.

Prints the table of `rft.consumers.ops.run_check`: tasks published, experiences committed, trained,
dropped (stale or filtered) and not reached, versions (and those retention pruned: their
announcements carry what they trained), dead letters; then each anomaly count
(experiences lost, trained twice, tasks never explored or explored twice, versions announced
without a verified manifest, versions off the chain, corrupt weights loaded) with examples.
Exits 0 when every anomaly count is 0, else 4. `--json` prints one JSON object. Reads only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from rft.cli.arguments import add_config_arguments


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="read a run's whole log and checkpoints; count lost, twice-trained, unexplored...",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(parser)
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers instead of the config's")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rft.catalog import load_config
    from rft.consumers.ops.run_check import RunChecker
    from rft.consumers.run_plan import RunPlan

    cfg = load_config(args.config, args.override, run_stage=args.stage)
    kafka = cfg.stack.kafka
    if args.bootstrap:
        kafka = dataclasses.replace(kafka, bootstrap_servers=args.bootstrap)
    checker = RunChecker.of_plan(RunPlan(cfg), kafka)
    report = checker.check()
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print("\n".join(report.table()))
    return 0 if report.ok else 4
