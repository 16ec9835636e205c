"""The run's Ray placement group, sized from the config: one slot per process, without Ray.

`cluster.node_num × cluster.gpu_per_node` GPUs in all. As in Trinity-RFT the rollout engines take
`engine_num × tensor_parallel_size` of them: one explorer process per engine, each on
`tensor_parallel_size` GPUs of one node, all in the run's explorer group (they share its tasks).
The trainer takes the rest: one slot per trainer rank, one GPU each. Without GPUs every slot
holds one CPU. `cluster.device: cpu` keeps the GPU-shaped slots but lets every process compute on
the CPU: the GPUs are then only declared to Ray, as on a CPU test machine.

The trainer's rank count is `trainer_world_size`, the one place that decides it.
"""

from __future__ import annotations

from dataclasses import dataclass

from rft.config import RftConfig
from rft.config.binding import Issue

TRAIN_VERB = "train"  # each trainer rank runs `rft train`, told its rank by RANK / WORLD_SIZE
EXPLORE_VERB = "explore"
CPUS_PER_SLOT = 1


def trainer_world_size(cfg: RftConfig) -> int:
    """Ranks of the trainer.

    The torch trainer engine trains in one process, so this is 1 until a trainer engine that runs
    across ranks sets `trainer.world_size` (GPU runs: the GPUs left after rollout; CPU runs: the
    configured count). Every rank gets a slot and the torch.distributed environment
    (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) from the Ray launcher already.
    """
    world = getattr(cfg.trainer, "world_size", None)
    return int(world) if world else 1


@dataclass(frozen=True)
class Slot:
    """One process of the run and the bundle of the placement group it runs in."""

    name: str  # the component's name in logs and messages: trainer, trainer-1, explorer, ...
    verb: str  # the `rft` verb it runs
    cpus: int
    gpus: int
    rank: int = 0  # of the trainer ranks, or of the explorer processes
    world_size: int = 1

    @property
    def bundle(self) -> dict[str, float]:
        return {"CPU": float(self.cpus), **({"GPU": float(self.gpus)} if self.gpus else {})}


@dataclass(frozen=True)
class Placement:
    """Every slot of the run, explorers first, and what the cluster must offer for them."""

    slots: tuple[Slot, ...]
    total_gpus: int  # node_num × gpu_per_node
    gpus_on_cpu: bool  # cluster.device cpu: GPUs only declared; processes compute on the CPU

    @property
    def bundles(self) -> list[dict[str, float]]:
        return [s.bundle for s in self.slots]

    @property
    def gpus(self) -> int:
        return sum(s.gpus for s in self.slots)

    @property
    def rollout_gpus(self) -> int:
        return sum(s.gpus for s in self.slots if s.verb == EXPLORE_VERB)

    @property
    def trainer_gpus(self) -> int:
        return sum(s.gpus for s in self.slots if s.verb == TRAIN_VERB)

    @property
    def cpus(self) -> int:
        return sum(s.cpus for s in self.slots)

    @property
    def idle_gpus(self) -> int:
        """GPUs of the cluster that no slot uses (the trainer trains on fewer than are left)."""
        return self.total_gpus - self.gpus


def placement_issues(cfg: RftConfig) -> list[Issue]:
    """What keeps the config's processes from fitting its cluster, each under its key."""
    cluster, rm = cfg.cluster, cfg.explorer.rollout_model
    if cluster.gpu_per_node == 0:
        return []
    issues = []
    total = cluster.node_num * cluster.gpu_per_node
    rollout = rm.engine_num * rm.tensor_parallel_size
    per_node = cluster.gpu_per_node // rm.tensor_parallel_size  # engines one node holds
    if rm.engine_num > cluster.node_num * per_node:
        issues.append(
            Issue(
                "explorer.rollout_model.tensor_parallel_size",
                f"{rm.engine_num} engines of {rm.tensor_parallel_size} GPUs do not fit on "
                f"{cluster.node_num} node(s) of cluster.gpu_per_node={cluster.gpu_per_node}: an "
                f"engine's GPUs are on one node, and a node holds {per_node} engine(s)",
            )
        )
    world = trainer_world_size(cfg)
    if total - rollout < world:
        issues.append(
            Issue(
                "cluster.gpu_per_node",
                f"{cluster.node_num} node(s) × {cluster.gpu_per_node} GPUs = {total}: the rollout "
                f"engines take {rollout} (engine_num {rm.engine_num} × tensor_parallel_size "
                f"{rm.tensor_parallel_size}) and leave {max(total - rollout, 0)} for the "
                f"{world} trainer rank(s); the ray launcher gives every process GPUs of its own",
            )
        )
    return issues


def plan_placement(cfg: RftConfig) -> Placement:
    """The slots of a config that `placement_issues` passed."""
    cluster, rm = cfg.cluster, cfg.explorer.rollout_model
    on_gpus = cluster.gpu_per_node > 0
    world = trainer_world_size(cfg)
    engines = rm.engine_num
    # rollout first: on a fresh node Ray hands the first bundles the first GPUs, as in Trinity-RFT
    slots = [
        Slot(
            name="explorer" if engines == 1 else f"explorer-{i}",
            verb=EXPLORE_VERB,
            cpus=CPUS_PER_SLOT,
            gpus=rm.tensor_parallel_size if on_gpus else 0,
            rank=i,
            world_size=engines,
        )
        for i in range(engines)
    ]
    slots += [
        Slot(
            name="trainer" if world == 1 else f"trainer-{rank}",
            verb=TRAIN_VERB,
            cpus=CPUS_PER_SLOT,
            gpus=1 if on_gpus else 0,
            rank=rank,
            world_size=world,
        )
        for rank in range(world)
    ]
    return Placement(
        slots=tuple(slots),
        total_gpus=cluster.node_num * cluster.gpu_per_node,
        gpus_on_cpu=cluster.device == "cpu",
    )
