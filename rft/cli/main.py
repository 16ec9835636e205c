"""The `rft` command: one sub-command module per verb, registered in `COMMANDS`.

Each module in `rft.cli` exposes `register(subparsers)`, which adds its parser and sets
`func(args) -> int`. Modules are imported lazily so `rft --help` stays fast and a missing optional
dependency only breaks the verb that needs it.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import io
import logging
import signal
import sys

from rft.errors import FENCED_EXIT_CODE, FencedError, RftError

# verb module names under rft.cli; each defines register(subparsers)
COMMANDS: tuple[str, ...] = (
    "stack_cmd",
    "topics_cmd",
    "publish_cmd",
    "feed_cmd",
    "tail_cmd",
    "metrics_cmd",
    "run_cmd",
    "explore_cmd",
    "train_cmd",
    "config_cmd",
    "bench_cmd",
    "replay_cmd",
    "status_cmd",
    "check_cmd",
    "gc_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rft", description="rft: event-sourced reinforcement fine-tuning of LLMs on Kafka"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"rft.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"rft.cli.{name}":
                continue  # verb not built yet
            raise
        module.register(sub)
    return parser


def exit_code(exc: RftError) -> int:
    """A fenced process exits with its own status, which supervisors do not restart."""
    return FENCED_EXIT_CODE if isinstance(exc, FencedError) else 1


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # `kill -USR1 PID` prints every thread's stack to stderr (a component's log under `rft run`):
    # a process that waits without saying on what tells where it is
    with contextlib.suppress(io.UnsupportedOperation, AttributeError, ValueError):
        # (not where stderr is no real file: a test's captured output, an embedding program)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except RftError as exc:
        print(f"rft {args.command}: error: {exc}", file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        print(f"rft {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
