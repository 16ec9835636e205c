"""The `ray` entry of LAUNCHERS: trainer ranks and explorers as Ray actors across a cluster."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rft.config.binding import Issue, Notice
from rft.config.schema import RftConfig
from rft.supervisor.launchers import RAY_REQUIREMENT, LaunchedGroup, RunCommand, feeds_online


class RayLauncher:
    """The trainer ranks and one explorer per rollout engine as Ray actors (`ray_group`)."""

    def check(self, cfg: RftConfig) -> list[Issue]:
        from rft.supervisor.ray_placement import placement_issues

        issues = []
        if importlib.util.find_spec("ray") is None:
            issues.append(
                Issue(
                    "cluster.launcher",
                    f"'ray' needs the ray package: pip install '{RAY_REQUIREMENT}' "
                    "(or the rft[ray] extra)",
                )
            )
        if feeds_online(cfg):
            issues.append(
                Issue(
                    "buffer.explorer_input.taskset.task_selector.selector_type",
                    "an online selector's task feeder is started by the local launcher only; "
                    "not yet under cluster.launcher: ray (run `rft feed` beside the run)",
                )
            )
        return issues + placement_issues(cfg)

    def notices(self, cfg: RftConfig) -> list[Notice]:
        from rft.supervisor.ray_placement import plan_placement, trainer_world_size

        notices = []
        if cfg.mode != "both":
            notices.append(
                Notice(
                    "cluster.launcher",
                    f"mode {cfg.mode!r} runs in the `rft` process itself; the ray launcher "
                    "places processes for mode both only",
                )
            )
        placement = plan_placement(cfg)
        if placement.idle_gpus > 0:
            notices.append(
                Notice(
                    "cluster.gpu_per_node",
                    f"{placement.idle_gpus} of the {placement.total_gpus} GPUs stay idle: the "
                    f"rollout engines take {placement.rollout_gpus} and the trainer, "
                    f"{trainer_world_size(cfg)} rank(s), {placement.trainer_gpus}",
                )
            )
        if cfg.explorer.rollout_model.engine_num > 1:
            notices.append(
                Notice(
                    "explorer.rollout_model.engine_num",
                    f"{cfg.explorer.rollout_model.engine_num} explorer processes, one per engine, "
                    "share the explorer group's tasks; each counts its own steps and stops when "
                    "the tasks run out",
                )
            )
        return notices

    def launch(self, cfg: RftConfig, command: RunCommand, log_dir: Path) -> LaunchedGroup:
        from rft.supervisor.ray_group import RayGroup

        return RayGroup.launch(cfg, command, log_dir)
