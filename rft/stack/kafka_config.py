"""The files a one-node KRaft broker runs from: `server.properties`, the log4j2 config, and the
cluster id that formats its storage.

Sized for a small machine: one node in combined mode (broker and controller), internal topics
with replication 1 so consumer groups and transactions work, and no rebalance delay.
"""

from __future__ import annotations

import base64
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from rft.errors import StackError

# settings shared with docker-compose.yml's Kafka service (tests/unit/test_compose.py checks that)
SMALL_NODE_SETTINGS: dict[str, str] = {
    "num.partitions": "4",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.network.threads": "2",
    "num.io.threads": "2",
}


@dataclass(frozen=True)
class KafkaNodeConfig:
    host: str
    port: int
    controller_port: int
    log_dir: Path
    node_id: int = 1


def render_server_properties(node: KafkaNodeConfig) -> str:
    lines = [
        "# written by `rft stack up`; edits are overwritten on the next start",
        "process.roles=broker,controller",
        f"node.id={node.node_id}",
        f"controller.quorum.voters={node.node_id}@{node.host}:{node.controller_port}",
        f"listeners=PLAINTEXT://{node.host}:{node.port},CONTROLLER://{node.host}:{node.controller_port}",
        f"advertised.listeners=PLAINTEXT://{node.host}:{node.port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        f"log.dirs={node.log_dir}",
    ]
    lines += [f"{key}={value}" for key, value in SMALL_NODE_SETTINGS.items()]
    return "\n".join(lines) + "\n"


def parse_properties(text: str) -> dict[str, str]:
    """The key=value pairs of a simple properties file (no continuation lines)."""
    out = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "!")):
            continue
        key, sep, value = stripped.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def render_log4j2_xml(log_dir: Path) -> str:
    """Broker logs roll in `log_dir/server.log` (10 MB x 5); state changes stay at WARN."""
    pattern = "[%d] %p %m (%c)%n"
    path = escape(str(log_dir / "server.log"))
    rolled = escape(str(log_dir / "server.log.%i"))
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- written by `rft stack up` -->
<Configuration status="WARN">
  <Appenders>
    <RollingFile name="server" fileName="{path}" filePattern="{rolled}">
      <PatternLayout pattern="{escape(pattern)}"/>
      <Policies><SizeBasedTriggeringPolicy size="10 MB"/></Policies>
      <DefaultRolloverStrategy max="5"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
  </Loggers>
</Configuration>
"""


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (22 chars).

    Like Kafka's own generator it never starts with '-', which command lines would read as an
    option."""
    while True:
        raw = uuid.UUID(bytes=os.urandom(16)).bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def load_or_create_cluster_id(path: Path) -> str:
    if path.exists():
        value = path.read_text().strip()
        if len(value) != 22:
            raise StackError(f"{path}: {value[:40]!r} is not a 22-character Kafka cluster id")
        return value
    path.parent.mkdir(parents=True, exist_ok=True)
    value = new_cluster_id()
    path.write_text(value + "\n")
    return value
