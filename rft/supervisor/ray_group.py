"""RayGroup: the `ray` launcher's components, as Ray actors in one placement group.

It sizes the placement group from the config (`ray_placement`), connects to Ray (`ray_cluster`),
starts one `ComponentHost` actor per slot (trainer ranks told rank 0's address for the
torch.distributed rendezvous; with a weight-sync group (`synchronizer.sync_method: nccl` or
`memory`) every component told its rendezvous on the trainer's node; under `memory` only
explorers on that node receive over it, the others use the store) and watches them for the supervisor. A
component that exits with a code other than 0, or whose actor dies, is a failure named with its
component and the last lines of its log; the supervisor then stops the rest. Nothing of the run's data passes through Ray.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from rft.config import RftConfig
from rft.config.schema import SynchronizerConfig
from rft.consumers.run_plan import PLACED_DEVICE_ENV
from rft.errors import LaunchError
from rft.supervisor.failure import Failure, exited, last_lines
from rft.supervisor.launchers import RunCommand
from rft.supervisor.ray_cluster import ActorNameTakenError, RayCallError, RayCluster, first_line
from rft.supervisor.ray_host import STOP_GRACE_S, ChildSpec, ComponentHost, HostStatus
from rft.supervisor.ray_placement import TRAIN_VERB, Placement, Slot, plan_placement
from rft.synchronizer.fast_path import has_fast_path

READY_TIMEOUT_S = 120.0  # for the placement group and the actors to come up
POLL_S = 0.5  # between checks of the components' exit
STATUS_S = 2.0  # between fetches of their last log lines and memory


@dataclass
class _Member:
    slot: Slot
    actor: Any  # the ComponentHost actor handle
    where: dict[str, str]
    wait_ref: Any = None
    returncode: int | None = None
    died: str | None = None  # why the actor is gone, when it died
    status: HostStatus | None = None
    status_ref: Any = None
    log_path: str = ""

    @property
    def running(self) -> bool:
        return self.returncode is None and self.died is None


class RayGroup:
    def __init__(self, cluster: RayCluster, placement: Placement, pg: Any) -> None:
        self.cluster = cluster
        self.placement = placement
        self.pg = pg
        self.members: list[_Member] = []
        self._peak = 0
        self._polled = 0.0
        self._status_at = 0.0
        self._stopped = False

    # -- start ----------------------------------------------------------------------------------

    @classmethod
    def launch(cls, cfg: RftConfig, command: RunCommand, log_dir: Path) -> RayGroup:
        """Connect, place and start every component; on any failure nothing is left running
        (a local Ray stops; on a cluster the actors die with this driver's job)."""
        placement = plan_placement(cfg)
        run = f"rft.{cfg.project}.{cfg.name}"
        cluster = RayCluster.connect(run, placement)
        try:
            for line in cluster.describe(placement):
                print(f"rft run: {line}", flush=True)
            _check_capacity(cluster, placement)
            pg = cluster.placement_group(placement.bundles, name=run)
            group = cls(cluster, placement, pg)
            group._await_placement()
            group._start(cfg, command, log_dir.resolve())
            return group
        except RayCallError as exc:  # an actor that could not start, a lost node
            cluster.close()
            raise LaunchError(f"starting the run's Ray actors: {exc}") from exc
        except BaseException:
            cluster.close()
            raise

    def _await_placement(self) -> None:
        if not self.cluster.placed(self.pg, READY_TIMEOUT_S):
            raise LaunchError(
                f"the Ray cluster at {self.cluster.address} did not place the run's "
                f"{len(self.placement.bundles)} bundles {self.placement.bundles} within "
                f"{READY_TIMEOUT_S:.0f}s (cluster.node_num × cluster.gpu_per_node, one bundle per "
                f"process); it has {self.cluster.resources()}"
            )

    def _start(self, cfg: RftConfig, command: RunCommand, log_dir: Path) -> None:
        cluster = self.cluster
        actors: list[Any] = []
        for index, slot in enumerate(self.placement.slots):
            try:
                actors.append(
                    cluster.start_actor(
                        ComponentHost,
                        slot.name,
                        name=slot.name,
                        cpus=slot.cpus,
                        gpus=slot.gpus,
                        max_concurrency=4,  # wait() blocks; status() and stop() answer meanwhile
                        group=self.pg,
                        bundle=index,
                    )
                )
            except ActorNameTakenError as exc:
                raise LaunchError(
                    f"another `rft run` of {cfg.project}.{cfg.name} holds actors on the Ray "
                    f"cluster at {self.cluster.address}: {exc}"
                ) from exc
        wheres = cluster.get([a.where.remote() for a in actors], timeout_s=READY_TIMEOUT_S)
        self.members = [
            _Member(s, a, w) for s, a, w in zip(self.placement.slots, actors, wheres, strict=True)
        ]
        rendezvous = self._rendezvous()
        text = command.config_path.read_text(encoding="utf-8")
        overrides = command.overrides + self._pinned_endpoints(cfg) + self._weight_group(cfg)
        # the trainer first, as the local launcher does: its consumer group is there when the
        # first experiences are
        for m in sorted(self.members, key=lambda m: m.slot.verb != TRAIN_VERB):
            spec = ChildSpec(
                verb=m.slot.verb,
                config_path=str(command.config_path.resolve()),
                config_text=text,
                overrides=overrides,
                cwd=os.getcwd(),
                log_dir=str(log_dir),
                env=child_env(m.slot, self.placement, rendezvous),
                unset_env=() if "OMP_NUM_THREADS" in os.environ else ("OMP_NUM_THREADS",),
                stage=command.stage,
            )
            cluster.get(m.actor.start.remote(spec), timeout_s=READY_TIMEOUT_S)
            m.wait_ref = m.actor.wait.remote()
            m.log_path = str(log_dir / f"{m.slot.name}.log")
            print(f"rft run: {self._describe(m)}", flush=True)

    def _rendezvous(self) -> dict[str, str]:
        """torch.distributed's env:// rendezvous at rank 0's node, for more than one rank."""
        rank0 = next(m for m in self.members if m.slot.verb == TRAIN_VERB and m.slot.rank == 0)
        if rank0.slot.world_size == 1:
            return {}
        port = self.cluster.get(rank0.actor.free_port.remote(), timeout_s=READY_TIMEOUT_S)
        return {"MASTER_ADDR": rank0.where["node"], "MASTER_PORT": str(port)}

    def _weight_group(self, cfg: RftConfig) -> tuple[str, ...]:
        """With a fast weight path, the rendezvous on the trainer's node (a free port there)."""
        if not needs_weight_group_address(cfg.synchronizer):
            return ()
        rank0 = next(m for m in self.members if m.slot.verb == TRAIN_VERB and m.slot.rank == 0)
        port = self.cluster.get(rank0.actor.free_port.remote(), timeout_s=READY_TIMEOUT_S)
        return (weight_group_override(rank0.where["node"], port),)

    def _pinned_endpoints(self, cfg: RftConfig) -> tuple[str, ...]:
        """On a cluster of other machines, every component talks to the Kafka and object store
        this process resolved (from the config or its environment), whatever their nodes'
        environments say. Secrets are not sent: each node reads them from its environment or
        the config."""
        if self.cluster.started_here:
            return ()
        return (
            f"stack.kafka.bootstrap_servers={cfg.stack.kafka.bootstrap_servers}",
            f"stack.object_store.endpoint={cfg.stack.object_store.endpoint}",
        )

    def _describe(self, m: _Member) -> str:
        slot = m.slot
        ranked = slot.verb == TRAIN_VERB and slot.world_size > 1
        rank = f" rank {slot.rank} of {slot.world_size}" if ranked else ""
        if not slot.gpus:
            gpus = "no GPU"
        elif self.placement.gpus_on_cpu:
            gpus = f"GPU {m.where['gpus']} declared, computing on the CPU"
        else:
            gpus = f"CUDA_VISIBLE_DEVICES={m.where['gpus']}"
        return (
            f"{slot.name}{rank} in a Ray actor on {m.where['node']} (pid {m.where['pid']}, "
            f"{gpus}); log {m.log_path}"
        )

    # -- watch ----------------------------------------------------------------------------------

    @property
    def peak_rss_bytes(self) -> int:
        return self._peak

    def alive(self) -> bool:
        self._poll()
        return any(m.running for m in self.members)

    def failures(self) -> list[Failure]:
        self._poll()
        out = []
        for m in self.members:
            if m.died is not None:
                what = f"lost its Ray actor on {m.where['node']}: {m.died}"
            elif m.returncode not in (None, 0):
                what = f"{exited(m.returncode)} (in its Ray actor on {m.where['node']})"
            else:
                continue
            out.append(Failure(m.slot.name, what, m.log_path, self._last_lines(m)))
        return out

    def exit_codes(self) -> dict[str, int | None]:
        return {m.slot.name: m.returncode for m in self.members}

    def cpu_seconds(self) -> dict[str, float]:
        """Each component's CPU time as its host last reported it (every STATUS_S)."""
        out: dict[str, float] = {}
        for m in self.members:
            if m.status is not None:
                out[m.slot.name] = out.get(m.slot.name, 0.0) + m.status.cpu_seconds
        return out

    def _poll(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._stopped and not force or not force and now - self._polled < POLL_S:
            return
        self._polled = now
        pending = {m.wait_ref: m for m in self.members if m.running}
        for ref in self.cluster.ready(list(pending), timeout_s=0):
            self._settle(pending[ref], ref)
        self._harvest_status()
        if now - self._status_at >= STATUS_S:
            self._status_at = now
            for m in self.members:
                if m.running and m.status_ref is None:
                    m.status_ref = m.actor.status.remote()
            self._peak = max(self._peak, self._rss())

    def _settle(self, m: _Member, ref: Any) -> None:
        try:
            m.returncode = int(self.cluster.get(ref))
        except RayCallError as exc:  # the actor died (killed, its node lost, out of memory)
            m.died = str(exc)

    def _harvest_status(self) -> None:
        refs = {m.status_ref: m for m in self.members if m.status_ref is not None}
        for ref in self.cluster.ready(list(refs), timeout_s=0):
            m = refs[ref]
            m.status_ref = None
            with contextlib.suppress(RayCallError):  # the wait ref says what became of the actor
                m.status = self.cluster.get(ref)

    def _last_lines(self, m: _Member) -> list[str]:
        if m.died is None:  # the actor is there: ask it for the end of its log
            with contextlib.suppress(RayCallError):
                m.status = self.cluster.get(m.actor.status.remote(), timeout_s=10)
        elif Path(m.log_path).is_file():  # the same machine (or a shared filesystem)
            return last_lines(Path(m.log_path))
        return m.status.last_lines if m.status else []

    def _rss(self) -> int:
        """The run's resident memory: a local Ray's daemons, actors and components are all
        descendants of this process; on a cluster, the hosts report their own."""
        me = psutil.Process()
        if self.cluster.started_here:
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            return total
        return me.memory_info().rss + sum(m.status.rss_bytes for m in self.members if m.status)

    # -- stop -----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Every component stopped (SIGINT first, in every actor at once), then the actors,
        the placement group and, if started for the run, the local Ray."""
        if self._stopped:
            return
        self._stopped = True
        cluster = self.cluster
        try:
            self._poll(force=True)
            live = [m for m in self.members if m.running]
            cluster.ready([m.actor.stop.remote(STOP_GRACE_S) for m in live], STOP_GRACE_S + 15)
            for m in live:
                if cluster.ready([m.wait_ref], timeout_s=5):
                    self._settle(m, m.wait_ref)
            for m in self.members:
                cluster.kill(m.actor)
            cluster.remove_placement_group(self.pg)
        except Exception as exc:  # noqa: BLE001 - the local Ray's shutdown below still runs
            print(f"rft run: stopping the Ray actors: {first_line(exc)}", file=sys.stderr)
        finally:
            self.cluster.close()


def _check_capacity(cluster: RayCluster, placement: Placement) -> None:
    """Fail at once, not after a timeout, when the cluster lacks the GPUs or CPUs in all."""
    have = cluster.resources()
    short = [
        f"{need} {kind}s (it has {have.get(kind, 0):.0f})"
        for kind, need in (("GPU", placement.gpus), ("CPU", placement.cpus))
        if need > have.get(kind, 0)
    ]
    if short:
        raise LaunchError(
            f"the Ray cluster at {cluster.address} is too small for the run's placement group: "
            f"it needs {' and '.join(short)}, one bundle per process "
            f"(cluster.node_num × cluster.gpu_per_node)"
        )


def needs_weight_group_address(sync: SynchronizerConfig) -> bool:
    """Whether the launcher places the weight-sync rendezvous: a fast path whose address is
    this host's loopback (the default), which explorers on other nodes could not reach. An
    address the config names is kept."""
    host = sync.weight_group_address.rpartition(":")[0]
    return has_fast_path(sync) and host in {"127.0.0.1", "localhost", "::1"}


def weight_group_override(node: str, port: int) -> str:
    return f"synchronizer.weight_group_address={node}:{port}"


def child_env(slot: Slot, placement: Placement, rendezvous: dict[str, str]) -> dict[str, str]:
    """The variables a component's process gets on top of its actor's environment."""
    env = {}
    if "OMP_NUM_THREADS" in os.environ:  # Ray sets 1 per CPU of the bundle; keep the user's
        env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]
    if slot.gpus and not placement.gpus_on_cpu:
        # the process sees only its bundle's GPUs (CUDA_VISIBLE_DEVICES): its first is cuda:0
        env[PLACED_DEVICE_ENV] = "cuda:0"
    if slot.verb == TRAIN_VERB and slot.world_size > 1:
        env.update(
            rendezvous,
            RANK=str(slot.rank),
            WORLD_SIZE=str(slot.world_size),
            LOCAL_RANK="0",  # each rank sees its own GPU only
        )
    return env
