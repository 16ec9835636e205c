"""One rank of a sharded trainer, for launchers that start the ranks themselves (Ray actors).

`run_trainer_rank(cfg, rank, world_size, master_addr, master_port, device)` is the whole life of
one rank: rank 0 joins the process group and runs the trainer loop (it alone reads experiences and
publishes versions; its `fsdp2` engine drives the others), ranks 1..N-1 serve rank 0's engine until
it stops them. Every rank calls it with the same `world_size`, `master_addr` (an address of rank
0's host the others can reach) and a free `master_port` there. The local launcher needs none of
this: `rft train` with `trainer.world_size: N` starts ranks 1..N-1 itself.

Devices: a follower computes on `device`. Rank 0 computes where the run plan puts the trainer
(`RunPlan.trainer_device`: `cpu`, or `cuda:<GPUs taken by rollout>`), so on GPUs its process must
see the node's GPUs under their node indices.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from rft.config import RftConfig
from rft.errors import ConfigError

if TYPE_CHECKING:
    from rft.consumers.trainer.offline_input import OfflineSource
    from rft.consumers.trainer.trainer import TrainerSummary


def run_trainer_rank(
    cfg: RftConfig,
    rank: int,
    world_size: int,
    master_addr: str,
    master_port: int,
    device: str = "cpu",
    *,
    stop: threading.Event | None = None,
    idle_timeout_s: float | None = None,
    offline: OfflineSource | None = None,
) -> TrainerSummary | None:
    """Run rank `rank` of the trainer; rank 0 returns the trainer's summary, the others None.
    `offline`: rank 0 trains that range of a topic (a dataset, `rft train --from-topic`)."""
    from rft.consumers.run_plan import RunPlan
    from rft.engines.fsdp_ranks import init_rank, serve_rank
    from rft.engines.trainer import TRAINER_ENGINES

    expected = cfg.trainer.world_size or 1
    if world_size != expected:
        raise ConfigError(f"trainer.world_size is {expected}, but {world_size} ranks were started")
    engine = cfg.trainer.engine_name
    if world_size > 1 and not TRAINER_ENGINES.spec(engine).many_ranks:
        raise ConfigError(
            f"trainer.trainer_type: the {cfg.trainer.engine_name} engine does not run over ranks"
        )
    if rank != 0:
        serve_rank(rank, world_size, master_addr, master_port, device)
        return None
    from rft.consumers.trainer.trainer import Trainer

    init_rank(0, world_size, master_addr, master_port, RunPlan(cfg).trainer_device)
    try:
        return Trainer(cfg, idle_timeout_s=idle_timeout_s, offline=offline).run(stop)
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
