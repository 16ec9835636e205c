"""The one-node Apache Kafka broker (KRaft, broker and controller in one JVM) of the local stack.

Runs `java -Xmx512m -cp '<libs>/*' kafka.Kafka <root>/config/kafka/server.properties` and formats
its storage with `kafka.tools.StorageTool` on first start, using a cluster id kept under the root.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from rft.stack.health import kafka_api_versions
from rft.stack.java_runtime import java_runtime
from rft.stack.kafka_config import (
    KafkaNodeConfig,
    load_or_create_cluster_id,
    render_log4j2_xml,
    render_server_properties,
)
from rft.stack.kafka_install import KAFKA_VERSION, kafka_libs
from rft.stack.layout import StackLayout
from rft.stack.managed_server import ManagedServer
from rft.stack.provision_route import ProvisionContext
from rft.stack.provision_step import run_step

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
JVM_OPTIONS: tuple[str, ...] = (
    "-Xmx512m",
    "-Xms128m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-Djava.awt.headless=true",
)


class KafkaServer(ManagedServer):
    name = "kafka"

    def __init__(
        self, layout: StackLayout, port: int, controller_port: int, ctx: ProvisionContext
    ) -> None:
        super().__init__(layout)
        self.port = port
        self.controller_port = controller_port
        self.ctx = ctx
        self._java: Path | None = None
        self._libs: Path | None = None

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.port, self.controller_port)

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def config_dir(self) -> Path:
        return self.layout.config(self.name)

    @property
    def data_dir(self) -> Path:
        return self.layout.data(self.name)

    @property
    def server_log(self) -> Path:
        return self.layout.logs / "kafka" / "server.log"

    def log_paths(self) -> tuple[Path, ...]:
        return (self.log_path, self.server_log)

    def provision(self) -> None:
        self._java = java_runtime(self.ctx)
        self._libs = kafka_libs(self.ctx)
        log.info("kafka %s: java %s, jars %s", KAFKA_VERSION, self._java, self._libs)

    def _classpath(self) -> str:
        if self._java is None or self._libs is None:
            self.provision()
        return f"{self._libs}/*"

    def prepare(self) -> None:
        classpath = self._classpath()
        node = KafkaNodeConfig(HOST, self.port, self.controller_port, self.data_dir)
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.server_log.parent.mkdir(parents=True, exist_ok=True)
        (self.config_dir / "server.properties").write_text(render_server_properties(node))
        (self.config_dir / "log4j2.xml").write_text(render_log4j2_xml(self.server_log.parent))
        if not (self.data_dir / "meta.properties").exists():
            self._format_storage(classpath)

    def _format_storage(self, classpath: str) -> None:
        cluster_id = load_or_create_cluster_id(self.layout.root / "kafka-cluster.id")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        run_step(
            f"formatting Kafka storage in {self.data_dir} (cluster {cluster_id})",
            [
                str(self._java),
                *self._log_options(),
                "-cp",
                classpath,
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                cluster_id,
                "--config",
                str(self.config_dir / "server.properties"),
                "--ignore-formatted",
            ],
            log_path=self.layout.logs / "kafka-format.log",
            env=self.ctx.env,
        )

    def _log_options(self) -> tuple[str, ...]:
        return (
            f"-Dlog4j2.configurationFile={self.config_dir / 'log4j2.xml'}",
            f"-Dkafka.logs.dir={self.server_log.parent}",
        )

    def command(self) -> tuple[Sequence[str], Mapping[str, str], str]:
        properties = str(self.config_dir / "server.properties")
        argv = [
            str(self._java),
            *JVM_OPTIONS,
            *self._log_options(),
            "-cp",
            self._classpath(),
            "kafka.Kafka",
            properties,
        ]
        return argv, {}, properties

    def probe(self) -> tuple[bool, str]:
        result = kafka_api_versions(HOST, self.port)
        return result.ok, result.detail
