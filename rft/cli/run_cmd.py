"""`rft run --config X.yaml`: the whole job, or one side of it, as the config's `mode` says.

mode both: bring the local stack up if needed, publish the tasksets, run the explorer and trainer
as separate processes and print progress and a summary. mode explore / train: run that side only,
in this process (Trinity-RFT's split setup: two configs differing only in `mode`), with a thread
that feeds that side's metrics to the configured sinks (`monitor.monitor_type`). mode bench:
evaluate the run's checkpoint versions on its eval tasksets and print a table (`rft bench`).
mode serve: the OpenAI-compatible endpoint on the run's policy, in this process, until interrupted
(rft.consumers.serve.server). A config with `stages:` runs its stages in order, each as one run
(rft.supervisor.stage_pipeline); every stage is checked before the first starts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rft.cli.explore_cmd import add_run_args
from rft.errors import ConfigError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("run", help="run a config: stack, publish, explore and train")
    add_run_args(parser)
    parser.add_argument(
        "--republish", action="store_true", help="publish the tasksets even if published before"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rft.catalog import load_config, load_pipeline
    from rft.consumers.explorer.env_vars import apply_env_vars

    def explorer_env(cfg: Any) -> None:  # before the load's registry checks import torch
        if cfg.mode in ("explore", "serve"):
            apply_env_vars(cfg.explorer.env_vars)

    if args.stage is not None:
        raise ConfigError(
            "rft run runs every stage of the config in order (a finished stage is not run "
            "again); --stage names one stage for the verbs that run one side of it"
        )
    pipeline = load_pipeline(args.config, args.override, before_parts=explorer_env)
    if pipeline[0][0] is None:
        return run_config(pipeline[0][1], args, list(args.override))
    from rft.supervisor.stage_pipeline import StagePipeline

    def run_one(stage: Any, extra: list[str]) -> int:
        overrides = [*args.override, *extra]
        cfg = load_config(args.config, overrides, before_parts=explorer_env, run_stage=stage.name)
        one = argparse.Namespace(**{**vars(args), "override": overrides, "stage": stage.name})
        return run_config(cfg, one, overrides, stage.name)

    stages = [(stage, cfg) for stage, cfg in pipeline if stage is not None]
    return StagePipeline(stages).run(run_one)


def run_config(
    cfg: Any, args: argparse.Namespace, overrides: list[str], run_stage: str | None = None
) -> int:
    """One run (or one stage's run), as its `mode` says."""
    if cfg.mode in ("explore", "train"):
        return run_side(cfg, args)
    if cfg.mode == "serve":
        from rft.consumers.serve.server import serve

        return serve(cfg)
    if cfg.mode == "bench":
        from rft.cli import bench_cmd

        return bench_cmd.run_bench(cfg, args, versions=None)
    import signal

    from rft.cli.explore_cmd import start_tracing
    from rft.supervisor.run_supervisor import RunSupervisor

    start_tracing("publisher", cfg)  # this process publishes; its children trace themselves

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # SIGTERM (and SIGINT, even where a shell started us with it ignored) stop the children too
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    summary = RunSupervisor(cfg, Path(args.config), overrides, run_stage).run(args.republish)
    print("\n== run summary")
    for line in summary.lines():
        print(line)
    return summary.exit_code


def run_side(cfg: Any, args: argparse.Namespace) -> int:
    """Mode explore / train: that side in this process, its metrics fed to the configured sinks
    by a follower thread beside it (mode both leaves the sinks to the supervisor)."""
    from rft.cli import explore_cmd, train_cmd
    from rft.consumers.metrics.follower import MODE_COMPONENTS, BackgroundMetricFollower

    if cfg.mode == "explore":
        args.explorer_id, args.idle_timeout = None, 60.0
        side = explore_cmd.run
    else:
        args.idle_timeout = None
        side = train_cmd.run
        if train_cmd.trains_on_dataset(cfg):
            publish_dataset_once(cfg, args.republish)
    with BackgroundMetricFollower.for_component(cfg, MODE_COMPONENTS[cfg.mode]) as sinks:
        code = side(args)
    if sinks.error is not None:
        print(f"rft run: metrics did not all reach the sinks: {sinks.error}", file=sys.stderr)
        return code or 1
    return code


def publish_dataset_once(cfg: Any, republish: bool) -> None:
    """A dataset run's first start publishes its dataset (`rft publish`); a restart finds it on
    the topic and resumes training it (--republish publishes it again; a resumed run still trains the range it began with)."""
    from rft.cli.publish_cmd import EXIT_SKIPPED_ROWS, publish_run_dataset
    from rft.consumers.run_plan import RunPlan
    from rft.producers.task_publisher import has_committed_tasks

    plan = RunPlan(cfg)
    plan.ensure_topics(plan.experience_topic)
    if not republish and has_committed_tasks(cfg.stack.kafka, plan.experience_topic):
        print(f"rft run: {plan.experience_topic} holds the dataset already; not published again")
        return
    code = publish_run_dataset(cfg, epochs=None, seed=42, on_bad_rows="fail", trace=False)
    if code not in (0, EXIT_SKIPPED_ROWS):
        raise SystemExit(code)
