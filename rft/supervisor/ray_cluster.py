"""RayCluster: the Ray cluster a run's actors live on, and the driver's connection to it.

With RAY_ADDRESS set, `rft run` attaches to that cluster (started with `ray start`, maybe across
machines). Without it, a local Ray is started for the run alone and stopped with it: the GPUs of
the placement are declared to it (real or not: `cluster.device: cpu` runs on a CPU machine), and
its object store is capped, since no experience and no weight travels through it (uncapped it
claims 30% of memory in /dev/shm). Its session files live in a fresh `rft-ray-*` temp directory,
removed at the end, so concurrent runs on one machine never share one.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rft.errors import LaunchError
from rft.supervisor.ray_placement import Placement

ADDRESS_ENV = "RAY_ADDRESS"
OBJECT_STORE_BYTES = 200_000_000
HEAD_PORT = 6379  # `ray start --head`'s default port, used in the instructions we print


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

    def close(self) -> None:
        """Disconnect; a local Ray started for the run is stopped and its files removed."""
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


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
