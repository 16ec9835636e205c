"""`rft config keys | reference | check`: what every config key does; a config checked as `rft run`
would check it.

`keys` prints one row per key: where it is acted on and the test that shows it
(`rft.config.key_fates`), or, for Trinity-RFT keys rft accepts without acting on, what happens
instead. `reference` prints the configuration reference page (docs/configuration.md) as Markdown.
`check --config X.yaml` loads a config (registry names, plugins, cross-key rules) and prints every
warning, exiting 1 on an error.
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

from rft.cli.arguments import add_config_arguments


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("config", help="config keys and their fate; check a config")
    verbs = parser.add_subparsers(dest="config_verb", metavar="VERB", required=True)
    keys = verbs.add_parser("keys", help="every config key: the code acting on it, or why ignored")
    keys.set_defaults(func=keys_table)
    reference = verbs.add_parser(
        "reference", help="the configuration reference page (docs/configuration.md) as Markdown"
    )
    reference.set_defaults(func=reference_page)
    check = verbs.add_parser("check", help="load a config and print its warnings")
    add_config_arguments(check)
    check.set_defaults(func=check_config)


def keys_table(args: argparse.Namespace) -> int:
    from rft.config.key_fates import ignored_keys, implemented_keys

    print("| key | fate | acted on in | shown by |")
    print("|---|---|---|---|")
    for key, fate in implemented_keys():
        print(f"| `{key}` | {fate.does} | `{fate.acts_in}` | `{fate.shown_by}` |")
    for key, reason in ignored_keys():
        print(f"| `{key}` | ignored, with a warning: {reason} | | |")
    return 0


def reference_page(args: argparse.Namespace) -> int:
    from rft.catalog.part_keys import parts_keys
    from rft.config.reference import render

    print(render(parts_keys()), end="")
    return 0


def check_config(args: argparse.Namespace) -> int:
    from rft.catalog import load_config
    from rft.config import ConfigWarning

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always", ConfigWarning)
        cfg = load_config(args.config, args.override, run_stage=args.stage)
    for warning in record:
        print(f"warning: {warning.message}")
    print(f"{args.config}: ok (mode {cfg.mode}, run {cfg.project}.{cfg.name})")
    return 0
