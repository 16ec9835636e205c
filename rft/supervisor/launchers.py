"""LAUNCHERS: how `rft run` places the explorer and trainer processes (`cluster.launcher`).

A launcher starts the run's components, each one `rft explore` / `rft train` command line, and
hands back a group the supervisor watches and stops: `local` starts them as child processes of
this one (`ProcessGroup`); `ray` as Ray actors in a placement group (`rft.supervisor.ray_group`,
imported only when chosen, so Ray stays an optional dependency). Whatever places them, the
components run the same code and Kafka and the object store carry the run's data.

A launcher is a class registered with `@LAUNCHERS.register(name)`, built without arguments, with
`check` (issues that stop the config loading), `notices` (warnings) and `launch`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rft.config.binding import Issue, Notice
from rft.config.derived import trainer_gpus
from rft.config.schema import RftConfig
from rft.engines.engine_ready import ENGINE_READY_FILE_ENV
from rft.engines.rollout import ROLLOUT_ENGINES
from rft.registry import Registry
from rft.supervisor.failure import Failure
from rft.supervisor.process_group import ProcessGroup

RAY_REQUIREMENT = "ray[default]==2.60.*"


@dataclass(frozen=True)
class RunCommand:
    """The `rft` command line of every component: its verb, the config file, the overrides,
    and the stage of a config with `stages:`."""

    config_path: Path
    overrides: tuple[str, ...] = ()
    stage: str | None = None

    def args(self, verb: str) -> list[str]:
        """The arguments after the Python interpreter (each host runs its own interpreter)."""
        out = ["-m", "rft.cli.main", verb, "--config", str(self.config_path)]
        for item in self.overrides:
            out += ["--override", item]
        if self.stage is not None:
            out += ["--stage", self.stage]
        return out

    def argv(self, verb: str) -> list[str]:
        return [sys.executable, *self.args(verb)]


def feeds_online(cfg: RftConfig) -> bool:
    """Whether the training taskset's selector is online: a task feeder process publishes it."""
    from rft.producers.task_selectors import is_online

    taskset = cfg.buffer.explorer_input.taskset
    return taskset is not None and is_online(taskset.task_selector.selector_type)


class LaunchedGroup(Protocol):
    """The running components of one run, as the supervisor sees them."""

    @property
    def peak_rss_bytes(self) -> int: ...

    def alive(self) -> bool:
        """Some component is still running."""
        ...

    def failures(self) -> list[Failure]:
        """Components that ended badly so far (exit code other than 0, or their host died)."""
        ...

    def stop(self) -> None:
        """Stop every component (SIGINT first, so each commits or aborts its open transaction)."""
        ...

    def exit_codes(self) -> dict[str, int | None]:
        """Exit code of each component; None while it runs or when its host died without one."""
        ...

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) each component's process tree has used, as last sampled."""
        ...


class Launcher(Protocol):
    def check(self, cfg: RftConfig) -> list[Issue]: ...

    def notices(self, cfg: RftConfig) -> list[Notice]: ...

    def launch(self, cfg: RftConfig, command: RunCommand, log_dir: Path) -> LaunchedGroup: ...


# the rule every launcher answers to is given the config: its package, and whether the run's
# processes fit its cluster (the launcher's own `check`)
LAUNCHERS: Registry[type[Launcher]] = Registry(
    "cluster.launcher", rule="rft.supervisor.launchers:launcher_issues"
)


def launcher_issues(name: str, spec: object, cfg: RftConfig) -> list[Issue]:
    """LAUNCHERS' rule: what launcher `name` says of placing `cfg`'s processes."""
    return LAUNCHERS.get(name)().check(cfg)


@LAUNCHERS.register("local")
class LocalLauncher:
    """The trainer and one explorer as child processes of `rft run`, on this machine."""

    def check(self, cfg: RftConfig) -> list[Issue]:
        return []

    def notices(self, cfg: RftConfig) -> list[Notice]:
        notices = []
        if cfg.cluster.node_num > 1:
            notices.append(
                Notice(
                    "cluster.node_num",
                    f"{cfg.cluster.node_num} nodes: rft starts processes on this machine only; "
                    "start `rft explore` / `rft train` on the other nodes against the same Kafka "
                    "and object store, or set cluster.launcher: ray",
                )
            )
        rollout = cfg.explorer.rollout_model
        # an engine with `tensor_parallel` spreads over tensor_parallel_size GPUs; others use one
        tp_used = ROLLOUT_ENGINES.spec(rollout.engine_type).tensor_parallel
        if rollout.engine_num > 1 or (rollout.tensor_parallel_size > 1 and not tp_used):
            notices.append(
                Notice(
                    "explorer.rollout_model.engine_num",
                    f"engine_num {rollout.engine_num} x tensor_parallel_size "
                    f"{rollout.tensor_parallel_size}: an explorer process runs one "
                    f"{rollout.engine_type} engine"
                    + (" on its tensor_parallel_size GPUs" if tp_used else " on one device")
                    + "; the rest only reserve GPUs before the trainer's in "
                    "cluster.gpu_per_node; start more explorer processes with the same "
                    "explorer.name for more engines",
                )
            )
        return notices

    def launch(self, cfg: RftConfig, command: RunCommand, log_dir: Path) -> LaunchedGroup:
        group = ProcessGroup(log_dir=log_dir)
        print(f"rft run: explorer and trainer logs in {log_dir}", flush=True)
        # Each component dies with `rft run` (die_with_parent): a supervisor killed outright
        # (SIGKILL, an OOM kill) must not leave an explorer and a trainer running on, unseen,
        # until a restarted run fences them.
        try:
            if shares_gpu(cfg):
                # The rollout engine sizes itself from the GPU's free memory while it starts
                # (vLLM's memory profiling fails outright when another process's usage changes
                # meanwhile): the trainer, on the same GPU, starts once the engine is up.
                ready = log_dir / "explorer.engine-ready"
                ready.unlink(missing_ok=True)
                group.start(
                    "explorer",
                    command.argv("explore"),
                    {ENGINE_READY_FILE_ENV: str(ready)},
                    die_with_parent=True,
                )
                if not wait_for_engine(group, ready):
                    return group  # the explorer failed to start: the supervisor reports it
                group.start("trainer", command.argv("train"), die_with_parent=True)
            else:
                group.start("trainer", command.argv("train"), die_with_parent=True)
                group.start("explorer", command.argv("explore"), die_with_parent=True)
            if feeds_online(cfg):  # an online task selector publishes from the rewards it reads
                group.start("feeder", command.argv("feed"), die_with_parent=True)
        except BaseException:
            group.stop()
            raise
        return group


def shares_gpu(cfg: RftConfig) -> bool:
    """Whether the trainer computes on the explorer's GPU (one GPU for both, `cuda:0`)."""
    return cfg.cluster.gpu_per_node > 0 and trainer_gpus(cfg) == 0


def wait_for_engine(group: ProcessGroup, ready: Path, poll_s: float = 0.5) -> bool:
    """Wait until the explorer writes `ready` (its rollout engine is up): True, or it exits
    first: False."""
    started = time.monotonic()
    print(
        "rft run: the trainer shares the explorer's GPU: it starts once the explorer's rollout "
        "engine is up",
        flush=True,
    )
    while not ready.exists():
        if not group.alive():
            return ready.exists()
        time.sleep(poll_s)
    print(
        f"rft run: the explorer's rollout engine is up after {time.monotonic() - started:.0f}s; "
        "starting the trainer",
        flush=True,
    )
    return True


# Ray is imported only when chosen: its launcher, placement and actors live in their own modules.
LAUNCHERS.lazy("ray", "rft.supervisor.ray_launcher:RayLauncher")


def launcher_for(cfg: RftConfig) -> Launcher:
    return LAUNCHERS.get(cfg.cluster.launcher)()
