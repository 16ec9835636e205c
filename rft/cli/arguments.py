"""The `--config` and `--override` arguments every config-reading verb takes, spelt once."""

from __future__ import annotations

import argparse


def add_override_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="dotlist override of the config (repeatable): trainer.total_steps=2",
    )


def add_config_arguments(
    parser: argparse.ArgumentParser, *, required: bool = True, help: str = "run config"
) -> None:
    """`--config PATH` (required unless the verb has another way to name the run),
    `--override KEY=VALUE` and `--stage NAME` (one stage of a config with `stages:`)."""
    parser.add_argument("--config", required=required, help=help)
    add_override_argument(parser)
    parser.add_argument(
        "--stage",
        metavar="NAME",
        help="with a config that has `stages:`, the stage to read (its own run)",
    )
