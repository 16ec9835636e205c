"""The ranks of the FSDP2 trainer engine: joining the process group, the command channel between
rank 0 and the others, and the followers' loop.

Rank 0 runs the trainer loop and drives the engine; ranks 1..N-1 (followers) only compute. Every
engine call on rank 0 is one command: rank 0 scatters to each rank its message (the method's name
and that rank's arguments, e.g. its shard of the batch), every rank runs that method of its
`ShardedWorker` (the FSDP collectives inside pair up), and rank 0 gathers the results. Messages
are pickled objects over a gloo group (the default group on the CPU, a second group beside NCCL on
GPUs), so batches never pass through a GPU to travel.

Entry points for launchers:
- `serve_rank(rank, world_size, master_addr, master_port, device)`: a follower's whole life: join,
  receive the model's setup from rank 0, build its worker, run commands until rank 0 stops it. It
  needs no config and no model files: rank 0 sends the structure and the weights.
- `init_rank(...)` with the same arguments: rank 0 joins before its trainer builds the engine,
  when another launcher (Ray) started the followers; the `fsdp2` engine then uses that group.
- `spawn_local_followers(...)`: rank 0 starts ranks 1..N-1 on this machine itself (the default,
  local launcher), as `python -m rft.engines.fsdp_ranks` processes: a fresh interpreter each, so
  nothing depends on how the trainer's own process was started. They exit when rank 0 stops them,
  or when the process that spawned them dies.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from rft.errors import EngineError

log = logging.getLogger(__name__)

# Followers wait for rank 0's next command as long as the trainer waits for experiences, which
# may be hours; a dead peer is noticed through its closed connection, not through this timeout.
RANK_TIMEOUT = timedelta(hours=24)
STOP = "stop"
SETUP = "setup"


@dataclass(frozen=True)
class Command:
    """One call of a `ShardedWorker` method, with this rank's keyword arguments."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)


def backend_for(device: str) -> str:
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def init_rank(
    rank: int,
    world_size: int,
    master_addr: str,
    master_port: int,
    device: str = "cpu",
    timeout: timedelta = RANK_TIMEOUT,
) -> None:
    """Join the trainer's process group as `rank` of `world_size` (gloo on CPU, NCCL on GPU)."""
    if dist.is_initialized():
        raise EngineError(f"rank {rank}: this process already belongs to a process group")
    if torch.device(device).type == "cuda":
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(
        backend_for(device),
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=timeout,
    )


class CommandChannel:
    """Commands from rank 0 to every rank and results back, over a gloo group.

    Every rank must create it at the same point after joining (on GPUs it creates a group).
    """

    def __init__(self, device: str) -> None:
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.group = (
            dist.new_group(backend="gloo", timeout=RANK_TIMEOUT)
            if backend_for(device) != "gloo"
            else None
        )

    def send(self, commands: list[Command]) -> Command:
        """Rank 0: give rank r `commands[r]`; returns rank 0's own."""
        if len(commands) != self.world_size:
            raise EngineError(f"{len(commands)} commands for {self.world_size} ranks")
        out: list[Any] = [None]
        dist.scatter_object_list(out, list(commands), src=0, group=self.group)
        return out[0]  # type: ignore[no-any-return]

    def receive(self) -> Command:
        """A follower: wait for rank 0's next command."""
        out: list[Any] = [None]
        dist.scatter_object_list(out, None, src=0, group=self.group)
        return out[0]  # type: ignore[no-any-return]

    def gather(self, result: Any) -> list[Any] | None:
        """Every rank's result on rank 0 (in rank order); None on the others."""
        out: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(result, out, dst=0, group=self.group)
        return out


def serve_rank(
    rank: int,
    world_size: int,
    master_addr: str,
    master_port: int,
    device: str = "cpu",
    parent_pid: int | None = None,
) -> None:
    """Run follower `rank` until rank 0 sends stop (or dies).

    `parent_pid`: exit when that process is gone (rank 0 spawned us and was killed).
    """
    from rft.engines.fsdp_worker import ShardedWorker

    if parent_pid is not None:
        _exit_with_parent(parent_pid, rank)
    torch.set_num_threads(max(1, torch.get_num_threads() // world_size))
    init_rank(rank, world_size, master_addr, master_port, device)
    try:
        channel = CommandChannel(device)
        first = channel.receive()
        if first.name != SETUP:
            raise EngineError(f"rank {rank}: expected the setup first, got {first.name!r}")
        worker = ShardedWorker(first.kwargs["setup"], device)
        channel.gather(None)
        while True:
            command = channel.receive()
            if command.name == STOP:
                channel.gather(None)
                break
            channel.gather(getattr(worker, command.name)(**command.kwargs))
    finally:
        dist.destroy_process_group()
    log.info("trainer rank %d stopped", rank)


def _exit_with_parent(parent_pid: int, rank: int) -> None:
    """Exit at once when the spawning process is gone: a killed rank 0 leaves no orphans."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        log.error("trainer rank %d: rank 0 (pid %d) is gone; exiting", rank, parent_pid)
        os._exit(3)

    threading.Thread(target=watch, name=f"rank{rank}-parent-watch", daemon=True).start()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def spawn_local_followers(
    devices: tuple[str, ...], master_addr: str, master_port: int
) -> list[subprocess.Popen[bytes]]:
    """Start ranks 1..N-1 (N = len(devices)) as processes of this machine; rank r on devices[r].

    They see this process's import path, and write to its stdout / stderr.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    processes = []
    for rank in range(1, len(devices)):
        command = [
            sys.executable,
            "-m",
            "rft.engines.fsdp_ranks",
            f"--rank={rank}",
            f"--world-size={len(devices)}",
            f"--master-addr={master_addr}",
            f"--master-port={master_port}",
            f"--device={devices[rank]}",
            f"--parent-pid={os.getpid()}",
        ]
        processes.append(subprocess.Popen(command, env=env))
    return processes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one follower rank of the fsdp2 trainer engine")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--master-addr", required=True)
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--parent-pid", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("RFT_LOG_LEVEL", "INFO"))
    serve_rank(
        args.rank,
        args.world_size,
        args.master_addr,
        args.master_port,
        args.device,
        parent_pid=args.parent_pid,
    )


if __name__ == "__main__":
    main()
