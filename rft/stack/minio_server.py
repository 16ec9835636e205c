"""The single-drive MinIO server of the local stack (S3 API and console on 127.0.0.1).

Credentials come from `ObjectStoreSettings` (RFT_S3_ACCESS_KEY / RFT_S3_SECRET_KEY, else the
documented dev pair) and reach MinIO only through its environment; `--anonymous` keeps them out of
its log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from rft.config.connections import ObjectStoreSettings
from rft.errors import StackError
from rft.stack.health import http_ok
from rft.stack.layout import StackLayout
from rft.stack.managed_server import ManagedServer
from rft.stack.minio_install import minio_binary
from rft.stack.provision_route import ProvisionContext

HOST = "127.0.0.1"
MIN_SECRET_LENGTH = 8  # MinIO refuses shorter root passwords


class MinioServer(ManagedServer):
    name = "minio"

    def __init__(
        self,
        layout: StackLayout,
        port: int,
        console_port: int,
        credentials: ObjectStoreSettings,
        ctx: ProvisionContext,
    ) -> None:
        super().__init__(layout)
        self.port = port
        self.console_port = console_port
        self.credentials = credentials
        self.ctx = ctx
        self._binary: Path | None = None

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.port, self.console_port)

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port} (console http://{HOST}:{self.console_port})"

    @property
    def data_dir(self) -> Path:
        return self.layout.data(self.name)

    def provision(self) -> None:
        self._binary = minio_binary(self.ctx)

    def command(self) -> tuple[Sequence[str], Mapping[str, str], str]:
        if self._binary is None:
            self.provision()
        if len(self.credentials.secret_key) < MIN_SECRET_LENGTH:
            raise StackError(
                f"RFT_S3_SECRET_KEY / object_store.secret_key must have at least "
                f"{MIN_SECRET_LENGTH} characters for MinIO"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        data = str(self.data_dir)
        argv = [
            str(self._binary),
            "server",
            data,
            "--address",
            f"{HOST}:{self.port}",
            "--console-address",
            f"{HOST}:{self.console_port}",
            "--anonymous",
        ]
        env = {
            "MINIO_ROOT_USER": self.credentials.access_key,
            "MINIO_ROOT_PASSWORD": self.credentials.secret_key,
            "MINIO_UPDATE": "off",
            "MINIO_CALLHOME_ENABLE": "off",
        }
        return argv, env, data

    def probe(self) -> tuple[bool, str]:
        result = http_ok(f"http://{HOST}:{self.port}/minio/health/live")
        return result.ok, result.detail
