"""`rft stack up | down | status`: the local Kafka + MinIO stack without Docker, and the Zipkin
trace server beside them when asked (`rft stack up --with zipkin`).

Settings default to `LocalStackSettings` (root `$RFT_STACK_ROOT` or ~/.cache/rft/stack, ports
39092/39093/39000/39001, Zipkin 39411); the flags override them for one call.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rft.config.connections import LocalStackSettings
from rft.stack.layout import default_cache_dir
from rft.stack.local_stack import LocalStack, StackStatus


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "stack", help="start, stop or inspect the local Kafka + MinIO stack"
    )
    actions = parser.add_subparsers(dest="stack_action", metavar="ACTION", required=True)

    common = argparse.ArgumentParser(add_help=False)
    defaults = LocalStackSettings()
    common.add_argument("--root", type=Path, default=defaults.root, help="data root")
    common.add_argument(
        "--cache", type=Path, default=None, help=f"download/build cache ({default_cache_dir()})"
    )
    common.add_argument("--kafka-port", type=int, default=defaults.kafka_port)
    common.add_argument("--kafka-controller-port", type=int, default=defaults.kafka_controller_port)
    common.add_argument("--minio-port", type=int, default=defaults.minio_port)
    common.add_argument("--minio-console-port", type=int, default=defaults.minio_console_port)
    common.add_argument("--zipkin-port", type=int, default=defaults.zipkin_port)

    up = actions.add_parser("up", parents=[common], help="provision (cached) and start; idempotent")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for health")
    up.add_argument(
        "--only",
        choices=("kafka", "minio"),
        default=None,
        help="start one service (e.g. kafka alone for a file:// checkpoint store)",
    )
    up.add_argument(
        "--with",
        dest="with_services",
        action="append",
        choices=("zipkin",),
        default=[],
        help="also start an optional service: zipkin (trace store and web UI)",
    )
    up.set_defaults(func=_up)

    down = actions.add_parser("down", parents=[common], help="stop what `up` started")
    down.add_argument("--timeout", type=float, default=30.0, help="seconds before SIGKILL")
    down.set_defaults(func=_down)

    status = actions.add_parser("status", parents=[common], help="health of the servers")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=_status)


def _stack(args: argparse.Namespace) -> LocalStack:
    settings = LocalStackSettings(
        root=args.root,
        kafka_port=args.kafka_port,
        kafka_controller_port=args.kafka_controller_port,
        minio_port=args.minio_port,
        minio_console_port=args.minio_console_port,
        zipkin_port=args.zipkin_port,
    )
    return LocalStack(settings, cache_dir=args.cache)


def _print_status(status: StackStatus) -> None:
    for s in status.services:
        state = "healthy" if s.healthy else ("unhealthy" if s.running else "stopped")
        pid = f"pid {s.pid}" if s.pid else "-"
        print(f"{s.name:<6} {state:<9} {pid:<11} {s.endpoint}")
        print(f"{'':<6} {s.detail}; log {s.log_path}")


def _up(args: argparse.Namespace) -> int:
    began = time.monotonic()
    stack = _stack(args)
    wanted = [args.only] if args.only else list(stack.default_services())
    wanted += [s for s in args.with_services if s not in wanted]
    result = stack.up(timeout_s=args.timeout, services=wanted)
    _print_status(result.status)
    started = ", ".join(result.started) or "nothing (already running)"
    print(f"started {started} in {time.monotonic() - began:.1f}s")
    return 0 if all(result.status.service(s).healthy for s in wanted) else 1


def _down(args: argparse.Namespace) -> int:
    stopped = _stack(args).down(timeout_s=args.timeout)
    print(f"stopped {', '.join(stopped) or 'nothing (no process of this root was running)'}")
    return 0


def _status(args: argparse.Namespace) -> int:
    status = _stack(args).status()
    if args.json:
        print(
            json.dumps(
                {"healthy": status.healthy, "services": [s.as_dict() for s in status.services]},
                indent=2,
            )
        )
    else:
        _print_status(status)
    return 0 if status.healthy else 1
