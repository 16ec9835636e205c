"""`rft explore --config X.yaml`: run one explorer process (a member of the explorer group)."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rft.cli.arguments import add_config_arguments

if TYPE_CHECKING:
    from rft.config import RftConfig


def add_run_args(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, help="run config (Trinity-RFT style YAML)")


def start_tracing(component: str, cfg: RftConfig | None = None) -> None:
    """This process's spans go where `monitor.trace_exporter` / `trace_args` say (default none;
    with no run config, where RFT_TRACE_EXPORTER says)."""
    from rft.tracing.setup import configure_from_monitor

    configure_from_monitor(component, cfg)


def stop_on_signals() -> threading.Event:
    """SIGINT/SIGTERM end the loop between steps, so the open transaction commits or aborts."""
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("explore", help="run an explorer: tasks -> experiences")
    add_run_args(parser)
    parser.add_argument("--explorer-id", help="id of this process (default: host-pid-random)")
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=60.0,
        help="stop after this many seconds without tasks",
    )
    parser.set_defaults(func=run)


def load_explorer_config(
    path: str, overrides: Sequence[str], run_stage: str | None = None
) -> RftConfig:
    """The run config, with `explorer.env_vars` set in this process's environment.

    The variables are set before anything imports torch or transformers (the config's registry
    checks do, right after): some of them (OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES,
    HF_HUB_OFFLINE) are read only when a library starts.
    """
    from rft.catalog import load_config
    from rft.consumers.explorer.env_vars import apply_env_vars

    # the load's registry checks import torch: the variables are set before that
    return load_config(
        path,
        overrides,
        before_parts=lambda c: apply_env_vars(c.explorer.env_vars),
        run_stage=run_stage,
    )


def run(args: argparse.Namespace) -> int:
    cfg = load_explorer_config(args.config, args.override, args.stage)
    from rft.consumers.explorer.explorer import Explorer

    start_tracing("explorer", cfg)
    explorer = Explorer(cfg, explorer_id=args.explorer_id, idle_timeout_s=args.idle_timeout)
    summary = explorer.run(stop_on_signals())
    print(
        json.dumps(
            {
                "explorer": explorer.explorer_id,
                "steps": summary.steps,
                "resumed_from": summary.resumed_from,
                "tasks": summary.tasks,
                "experiences": summary.experiences,
                "rejected_tasks": summary.rejected_tasks,
                "rollout_tokens_per_s": summary.generated_tokens / summary.rollout_seconds
                if summary.rollout_seconds
                else 0.0,
                "eval_accuracy": summary.eval_accuracy,
            }
        )
    )
    return 0
