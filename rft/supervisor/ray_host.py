"""ComponentHost: the body of the Ray actor that runs one component of a run as its child process.

The actor holds one bundle of the run's placement group (its GPUs arrive as
CUDA_VISIBLE_DEVICES) and runs the component's `rft explore` / `rft train` command line in a
ProcessGroup of one, so it runs exactly what the local launcher runs. Only the command line, the
config text, a few environment variables and the last lines of the log pass through Ray: Kafka and
the object store carry experiences and weights. The child dies with the actor (the kernel's
parent-death signal), so a lost actor leaves no process behind.

The class does not import Ray: `rft.supervisor.ray_group` starts it as an actor (through
`rft.supervisor.ray_cluster`, Ray's one module), and tests drive it directly.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rft.supervisor.failure import last_lines
from rft.supervisor.launchers import RunCommand
from rft.supervisor.process_group import ProcessGroup
from rft.supervisor.ray_cluster import node_address

STOP_GRACE_S = 20.0


@dataclass(frozen=True)
class ChildSpec:
    """What the supervisor sends a host: everything its component's process needs."""

    verb: str
    config_path: str  # the supervisor's config file, used when this node has it unchanged
    config_text: str  # else written next to the log and used instead
    overrides: tuple[str, ...]
    cwd: str  # the supervisor's working directory, used when this node has it
    log_dir: str
    env: dict[str, str] = field(default_factory=dict)  # set in the child
    unset_env: tuple[str, ...] = ()  # removed from the child's environment
    stage: str | None = None  # the stage of a config with `stages:`


@dataclass(frozen=True)
class HostStatus:
    returncode: int | None  # None while the component runs
    rss_bytes: int  # the actor and its component's process tree, now
    last_lines: list[str]
    cpu_seconds: float = 0.0  # CPU time its component's process tree has used so far


class ComponentHost:
    """Runs one component's command line as its child process and answers for it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.group: ProcessGroup | None = None
        self.log_path: Path | None = None

    def where(self) -> dict[str, str]:
        """Node, actor pid and the GPUs Ray gave this actor (CUDA_VISIBLE_DEVICES)."""
        return {
            "node": node_address(),
            "pid": str(os.getpid()),
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        }

    def free_port(self) -> int:
        """A TCP port free on this node now: rank 0's torch.distributed rendezvous port."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def start(self, spec: ChildSpec) -> int:
        """Start the component; returns the child's pid."""
        if self.group is not None:
            raise RuntimeError(f"{self.name}: already started")
        log_dir = Path(spec.log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        config = Path(spec.config_path)
        if not _holds(config, spec.config_text):
            # another machine: the config travels as text (relative paths in it then resolve
            # against this node's working directory)
            config = log_dir / f"{self.name}.config.yaml"
            config.write_text(spec.config_text, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if k not in spec.unset_env}
        env.update(spec.env)
        command = RunCommand(config, spec.overrides, spec.stage)
        self.group = ProcessGroup(log_dir=log_dir)
        child = self.group.start(
            self.name,
            [sys.executable, *command.args(spec.verb)],
            env,
            cwd=spec.cwd if Path(spec.cwd).is_dir() else None,
            die_with_parent=True,
            replace_env=True,
        )
        self.log_path = child.log_path
        return child.popen.pid

    def wait(self) -> int:
        """Block until the component exits; its exit code."""
        assert self.group is not None, "start first"
        return self.group.children[0].popen.wait()

    def status(self) -> HostStatus:
        code = self.group.children[0].returncode if self.group else None
        rss, cpu = self.group.sample() if self.group else (0, {})
        return HostStatus(code, rss, last_lines(self.log_path), sum(cpu.values()))

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGINT (the component commits or aborts its open step), then SIGTERM, then SIGKILL."""
        if self.group is None:
            return None
        self.group.stop(grace_s=grace_s)
        return self.group.children[0].returncode


def _holds(path: Path, text: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") == text
    except OSError:
        return False
