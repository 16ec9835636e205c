"""RayCluster: the Ray cluster a run's actors live on, and the driver's connection to it: rft's one
way to Ray (this module imports it, no other does).

With RAY_ADDRESS set, `rft run` attaches to that cluster (started with `ray start`, maybe across
machines). Without it, a local Ray is started for the run alone and stopped with it: the GPUs of
the placement are declared to it (real or not: `cluster.device: cpu` runs on a CPU machine), and
its object store is capped, since no experience and no weight travels through it (uncapped it
claims 30% of memory in /dev/shm). Its session files live in a fresh `rft-ray-*` temp directory,
removed at the end, so concurrent runs on one machine never share one.

The calls `rft.supervisor.ray_group` makes (a placement group, actors in its bundles, waiting on
and fetching their results, killing them) are methods here, and Ray's errors leave them as rft's:
a call on an actor that died, or one that timed out, is a RayCallError, a name another run's actor
holds is an ActorNameTakenError (both LaunchErrors). Ray's handles (actors, object refs, placement
groups) pass through untouched, as `Any`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rft.errors import LaunchError
from rft.supervisor.ray_placement import Placement

ADDRESS_ENV = "RAY_ADDRESS"
OBJECT_STORE_BYTES = 200_000_000
HEAD_PORT = 6379  # `ray start --head`'s default port, used in the instructions we print

Actor = Any  # a Ray actor handle: `actor.method.remote(...)` returns a Ref
Ref = Any  # a Ray object ref
PlacementGroup = Any


class RayCallError(LaunchError):
    """A Ray call failed: its actor died (killed, its node lost, out of memory) or it timed out.
    The message is the first line of Ray's error."""


class ActorNameTakenError(LaunchError):
    """An actor of that name lives already in the run's Ray namespace."""


@dataclass
class RayCluster:
    address: str
    started_here: bool
    temp_dir: Path | None = None

    @classmethod
    def connect(cls, namespace: str, placement: Placement) -> RayCluster:
        """Attach to RAY_ADDRESS's cluster, or start a local one sized for `placement`."""
        import ray

        address = os.environ.get(ADDRESS_ENV)
        # ray.init installs its own SIGTERM handler (exit at once, killing the node); rft run's
        # handler stops the components first, so it is put back
        previous = signal.getsignal(signal.SIGTERM)
        try:
            if address:
                try:
                    ray.init(address=address, namespace=namespace, log_to_driver=False)
                except Exception as exc:  # ConnectionError, AuthenticationError, ...
                    raise LaunchError(
                        f"{ADDRESS_ENV}={address}: cannot attach to that Ray cluster: "
                        f"{type(exc).__name__}: {exc}{_auth_hint(exc)}"
                    ) from exc
                return cls(address, started_here=False)
            temp = Path(tempfile.mkdtemp(prefix="rft-ray-"))
            # registered before ray.init, so it runs after Ray's own exit hook has stopped the
            # local Ray, even when `rft run` dies before close() (a broken stdout pipe)
            atexit.register(shutil.rmtree, temp, ignore_errors=True)
            try:
                ray.init(
                    address="local",
                    num_cpus=max(os.cpu_count() or 1, placement.cpus),
                    num_gpus=placement.total_gpus,
                    include_dashboard=False,
                    object_store_memory=OBJECT_STORE_BYTES,
                    namespace=namespace,
                    log_to_driver=False,
                    _temp_dir=str(temp),
                )
            except Exception as exc:
                shutil.rmtree(temp, ignore_errors=True)
                raise LaunchError(f"cannot start a local Ray: {type(exc).__name__}: {exc}") from exc
            return cls(ray.get_runtime_context().gcs_address, started_here=True, temp_dir=temp)
        finally:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, previous)

    def resources(self) -> dict[str, float]:
        import ray

        return {k: float(v) for k, v in ray.cluster_resources().items()}

    def node_count(self) -> int:
        import ray

        return sum(1 for n in ray.nodes() if n.get("Alive"))

    def describe(self, placement: Placement) -> list[str]:
        """What `rft run` prints about the cluster, and how to run across machines."""
        if not self.started_here:
            res = self.resources()
            return [
                f"attached to the Ray cluster at {self.address} ({self.node_count()} node(s), "
                f"{res.get('CPU', 0):.0f} CPUs, {res.get('GPU', 0):.0f} GPUs)"
            ]
        declared = f", {placement.total_gpus} GPUs declared" if placement.total_gpus else ""
        return [
            f"started a local Ray for this run at {self.address}"
            f"{declared}, object store {OBJECT_STORE_BYTES // 1_000_000} MB; it stops with the run",
            "across machines (docs/training.md, Placement on Ray): with RAY_AUTH_MODE=token and one token "
            "everywhere, `ray start --head` on one, `ray start --address=<head-ip>:"
            f"{HEAD_PORT}` on the others (rft installed, Kafka and object store reachable), "
            f"then `{ADDRESS_ENV}=<head-ip>:{HEAD_PORT} rft run --config ...` on the head",
        ]

    # -- placement groups and actors -------------------------------------------------------------

    def placement_group(self, bundles: Sequence[dict[str, float]], name: str) -> PlacementGroup:
        """A placement group of `bundles`, packed onto as few nodes as they fit."""
        from ray.util.placement_group import placement_group

        with _translated():
            return placement_group(list(bundles), strategy="PACK", name=name)

    def placed(self, group: PlacementGroup, timeout_s: float) -> bool:
        """Whether every bundle of `group` was placed within `timeout_s`."""
        import ray
        from ray.exceptions import GetTimeoutError

        with _translated():
            try:
                ray.get(group.ready(), timeout=timeout_s)
            except GetTimeoutError:
                return False
        return True

    def start_actor(
        self,
        cls: type,
        *args: Any,
        name: str,
        cpus: float,
        gpus: float,
        max_concurrency: int,
        group: PlacementGroup,
        bundle: int,
    ) -> Actor:
        """An actor of `cls(*args)` named `name` in bundle `bundle` of `group`. It is never
        restarted: a restarted component would resume from the log on its own, so its death is
        the run's failure instead."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=bundle)
        options: Any = ray.remote(cls).options(
            name=name,
            num_cpus=cpus,
            num_gpus=gpus,
            max_concurrency=max_concurrency,
            max_restarts=0,
            scheduling_strategy=strategy,
        )
        try:
            with _translated():
                return options.remote(*args)
        except ValueError as exc:  # Ray's word for a name that is taken in the namespace
            raise ActorNameTakenError(str(exc)) from exc

    def get(self, refs: Any, timeout_s: float | None = None) -> Any:
        """The result of a ref (or a list of them, in order), waiting at most `timeout_s`."""
        import ray

        with _translated():
            return ray.get(refs, timeout=timeout_s)

    def ready(self, refs: Sequence[Ref], timeout_s: float) -> list[Ref]:
        """Those of `refs` whose results are there within `timeout_s` (0: those there now)."""
        import ray

        if not refs:
            return []
        with _translated():
            done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        return list(done)

    def kill(self, actor: Actor) -> None:
        import ray

        with _translated():
            ray.kill(actor)

    def remove_placement_group(self, group: PlacementGroup) -> None:
        from ray.util.placement_group import remove_placement_group

        with _translated():
            remove_placement_group(group)

    def close(self) -> None:
        """Disconnect; a local Ray started for the run is stopped and its files removed."""
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def node_address() -> str:
    """This node's address as Ray knows it, in a Ray actor (the host name outside Ray)."""
    try:
        import ray.util

        return str(ray.util.get_node_ip_address())
    except Exception:  # noqa: BLE001 - outside Ray (tests) the host name will do
        return socket.gethostname()


@contextmanager
def _translated() -> Iterator[None]:
    """Ray's errors raised in the block, as RayCallError."""
    from ray.exceptions import RayError

    try:
        yield
    except RayError as exc:
        raise RayCallError(first_line(exc)) from exc


def first_line(exc: Any) -> str:
    """The first meaningful line of a Ray error (they run to dozens of lines)."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def _auth_hint(exc: BaseException) -> str:
    """Ray sends its token to an explicit address only in token mode; say so when that failed
    (Ray wraps the authentication error's text in a RuntimeError behind its ConnectionError)."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    if os.environ.get("RAY_AUTH_MODE") != "token" and any(
        "AuthenticationError" in f"{type(e).__name__} {e}" or "InvalidAuthToken" in str(e)
        for e in chain
    ):
        return (
            " (the cluster wants Ray's token: set RAY_AUTH_MODE=token, with the head's "
            "~/.ray/auth_token here or RAY_AUTH_TOKEN)"
        )
    return ""
