"""The load stage of the run-length rules (rft.config.run_length): it counts the taskset's tasks
(producers' readers and generators) and asks the sync style for its staleness bound.

`check_run_length` imports them when it runs: their modules import torch, and
`load_config(before_parts=...)` acts on settings that must precede that import.
"""

from __future__ import annotations

from pathlib import Path

from rft.config.binding import Issue, Notice
from rft.config.run_length import STALENESS_KEY, counts_tasks, staleness_supply, task_supply
from rft.config.schema import RftConfig
from rft.errors import ConfigError


def check_run_length(cfg: RftConfig) -> tuple[list[Issue], list[Notice]]:
    """Both rules for `cfg` (not for mode bench, which never trains)."""
    if cfg.mode == "bench":
        return [], []
    from rft.producers.task_selectors import is_online
    from rft.producers.taskset_reader import count_tasks
    from rft.synchronizer import build_sync_style

    issues: list[Issue] = []
    notices: list[Notice] = []
    taskset = cfg.buffer.explorer_input.taskset
    if (
        taskset is not None
        and counts_tasks(cfg)
        and not is_online(taskset.task_selector.selector_type)
    ):
        rows = count_tasks(taskset)
        if rows is not None:
            found, said = task_supply(cfg, rows)
            issues += found
            notices += said
    dataset = dataset_algorithm(cfg)
    if dataset is not None:
        # no explorer samples a dataset's rows: no sync style's bound applies to them
        return issues, notices + dataset_staleness(cfg, dataset)
    sync = cfg.synchronizer
    try:
        style = build_sync_style(
            sync.sync_style, sync.sync_interval, sync.sync_offset, sync.max_head_offpolicyness
        )
    except ConfigError:
        return issues, notices  # check_parts names it
    found, said = staleness_supply(cfg, style.staleness_bound)
    return issues + found, notices + said


def dataset_algorithm(cfg: RftConfig) -> str | None:
    """The algorithm_type when it trains on a dataset's rows (its preset's trait `dataset`: sft,
    cpt, dpo), else None (also for an algorithm section that does not resolve: the load names
    that)."""
    from rft.algorithms.presets import resolve_algorithm

    try:
        spec = resolve_algorithm(cfg.algorithm, check_repeat_times=False)
    except ConfigError:
        return None  # check_parts names it
    return cfg.algorithm.algorithm_type if spec.dataset is not None else None


def dataset_staleness(cfg: RftConfig, algorithm_type: str) -> list[Notice]:
    """What a configured max_staleness does in a run on a dataset: nothing (the trainer reads
    the dataset's topic as an offline range and sets it aside, rft.consumers.trainer.trainer)."""
    limit = cfg.buffer.trainer_input.max_staleness
    if limit is None:
        limit = cfg.algorithm.sample_strategy_args.get("max_staleness")
    if limit is None:
        return []
    return [
        Notice(
            STALENESS_KEY,
            f"{limit} is not applied: algorithm_type {algorithm_type} trains on a dataset's rows, "
            "which no policy version generated (each is published with model_version 0); every "
            "row is trained whatever the trainer's version",
        )
    ]


def run_length_stage(cfg: RftConfig, base_dir: Path | None) -> tuple[list[Issue], list[Notice]]:
    """`check_run_length` as a load stage."""
    return check_run_length(cfg)
