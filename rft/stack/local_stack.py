"""`LocalStack`: the local Kafka broker and MinIO server (and, when asked, the Zipkin trace server)
as one unit that `rft stack up | down | status` and the test fixtures drive.

`up` is idempotent: servers this root already runs are kept, the rest are provisioned (cached after
the first time), started detached and waited for until healthy. `down` stops only processes whose
pid files under this root still match. A file lock serialises concurrent `up`/`down` calls.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rft.config.connections import (
    KafkaSettings,
    LocalStackSettings,
    ObjectStoreSettings,
    StackSettings,
)
from rft.errors import StackError
from rft.stack.health import tcp_open
from rft.stack.kafka_server import KafkaServer
from rft.stack.layout import StackLayout, default_cache_dir
from rft.stack.managed_server import ManagedServer
from rft.stack.minio_server import MinioServer
from rft.stack.provision_route import ProvisionContext
from rft.stack.provision_step import log_tail
from rft.stack.service import ServiceStatus
from rft.stack.zipkin_server import ZipkinServer

log = logging.getLogger(__name__)

HOST = "127.0.0.1"


@dataclass(frozen=True)
class StackStatus:
    services: tuple[ServiceStatus, ...]

    @property
    def healthy(self) -> bool:
        return all(s.healthy for s in self.services)

    @property
    def running(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.services if s.running)

    def service(self, name: str) -> ServiceStatus:
        for s in self.services:
            if s.name == name:
                return s
        raise KeyError(name)


@dataclass(frozen=True)
class UpResult:
    started: tuple[str, ...]  # services this call started; empty when all were already up
    status: StackStatus


class LocalStack:
    def __init__(
        self,
        settings: LocalStackSettings | None = None,
        object_store: ObjectStoreSettings | None = None,
        cache_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings or LocalStackSettings()
        self.object_store = object_store or ObjectStoreSettings()
        self.layout = StackLayout(
            root=Path(self.settings.root).expanduser(),
            cache=Path(cache_dir or default_cache_dir()).expanduser(),
        )
        ctx = ProvisionContext(
            cache=self.layout.cache, env=dict(os.environ if env is None else env)
        )
        self.kafka = KafkaServer(
            self.layout, self.settings.kafka_port, self.settings.kafka_controller_port, ctx
        )
        self.minio = MinioServer(
            self.layout,
            self.settings.minio_port,
            self.settings.minio_console_port,
            self.object_store,
            ctx,
        )
        self.zipkin = ZipkinServer(self.layout, self.settings.zipkin_port, ctx)
        self.services: tuple[ManagedServer, ...] = (self.kafka, self.minio, self.zipkin)

    @classmethod
    def from_stack_settings(cls, stack: StackSettings, cache_dir: Path | None = None) -> LocalStack:
        return cls(stack.local, stack.object_store, cache_dir)

    def stack_settings(self) -> StackSettings:
        """Connection settings pointing at this stack (whatever the environment says)."""
        return StackSettings(
            kafka=KafkaSettings(bootstrap_servers=f"{HOST}:{self.settings.kafka_port}"),
            object_store=ObjectStoreSettings(
                endpoint=f"{HOST}:{self.settings.minio_port}",
                access_key=self.object_store.access_key,
                secret_key=self.object_store.secret_key,
                bucket=self.object_store.bucket,
            ),
            local=self.settings,
        )

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.layout.create()
        with open(self.layout.lock_file, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def up(self, timeout_s: float = 120.0, services: Iterable[str] | None = None) -> UpResult:
        """Start the named services (default: all but the optional ones) that are not running;
        wait until healthy."""
        chosen = self._select(services)
        with self._locked():
            to_start = [s for s in chosen if not s.is_running()]
            for service in to_start:
                self._check_ports_free(service)
            for service in to_start:
                service.provision()
            for service in to_start:
                log.info(
                    "starting %s on %s (log: %s)",
                    service.name,
                    service.endpoint,
                    service.log_paths()[-1],
                )
                service.start()
            self._wait_healthy(timeout_s, chosen)
            return UpResult(tuple(s.name for s in to_start), self.status())

    def default_services(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.services if not s.optional)

    def _select(self, services: Iterable[str] | None) -> list[ManagedServer]:
        if services is None:
            return [s for s in self.services if not s.optional]
        wanted = set(services)
        unknown = wanted - {s.name for s in self.services}
        if unknown:
            raise StackError(f"unknown stack services: {sorted(unknown)}")
        return [s for s in self.services if s.name in wanted]

    def _check_ports_free(self, service: ManagedServer) -> None:
        for port in service.ports:
            if tcp_open(HOST, port, timeout_s=0.5):
                raise StackError(
                    f"{service.name}: port {HOST}:{port} is already in use by a process this "
                    f"stack root ({self.layout.root}) did not start; stop it or pick other ports"
                )

    def _wait_healthy(self, timeout_s: float, services: list[ManagedServer]) -> None:
        deadline = time.monotonic() + timeout_s
        pending = list(services)
        details: dict[str, str] = {}
        while pending:
            for service in list(pending):
                ok, details[service.name] = service.probe()
                if ok:
                    pending.remove(service)
                elif service.has_exited():
                    raise StackError(self._failure(service, "exited during start-up"))
            if not pending:
                return
            if time.monotonic() > deadline:
                names = ", ".join(s.name for s in pending)
                raise StackError(
                    f"not healthy after {timeout_s:.0f}s: {names}\n"
                    + "\n".join(self._failure(s, f"last probe: {details[s.name]}") for s in pending)
                )
            time.sleep(0.5)

    @staticmethod
    def _failure(service: ManagedServer, what: str) -> str:
        logs = service.log_paths()
        tail = next((log_tail(p) for p in reversed(logs) if p.exists()), "")
        where = ", ".join(str(p) for p in logs)
        return f"{service.name} {what}; logs: {where}\n{tail}"

    def down(
        self, services: Iterable[str] | None = None, timeout_s: float = 30.0
    ) -> tuple[str, ...]:
        """Stop this root's servers (all, or the named ones); returns the names stopped."""
        chosen = list(self.services) if services is None else self._select(services)
        stopped = []
        with self._locked():
            # Kafka last: nothing in the stack depends on the others staying up while it stops
            for service in reversed(chosen):
                if service.stop(timeout_s):
                    log.info("stopped %s", service.name)
                    stopped.append(service.name)
        return tuple(stopped)

    def status(self) -> StackStatus:
        """Every server that always runs, and the optional ones that run now."""
        return StackStatus(
            tuple(s.status() for s in self.services if not s.optional or s.is_running())
        )
