"""Where the event plane and the object store live: the `stack` section of a run config.

Defaults point at the local stack that `rft stack up` starts. Secrets come from the environment
(RFT_S3_ACCESS_KEY / RFT_S3_SECRET_KEY) or the config, never from code; the fallbacks below are the
documented development credentials of the local MinIO and nothing else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

DEV_ACCESS_KEY = "rft-dev-access"
DEV_SECRET_KEY = "rft-dev-secret-key"


def default_stack_root() -> Path:
    return Path(os.environ.get("RFT_STACK_ROOT", Path.home() / ".cache" / "rft" / "stack"))


@dataclass
class KafkaSettings:
    """Kafka endpoint and topic defaults."""

    bootstrap_servers: str = field(
        default_factory=lambda: os.environ.get("RFT_KAFKA_BOOTSTRAP", "127.0.0.1:39092")
    )
    client: str = "confluent"  # "confluent" (confluent-kafka) or "kafka-python"
    partitions: int = 4
    replication_factor: int = 1
    retention_ms: int = -1  # -1 keeps events forever: the experience topic is a dataset
    schema_registry_url: str | None = None  # Confluent-compatible registry; off unless set
    extra: dict[str, str] = field(default_factory=dict)  # passed through to the client
    # Seconds a component keeps retrying once Kafka, reached before, stops answering; past it
    # the component exits naming the address (rft/stack/outage_window.py).
    outage_timeout: float = 300.0


@dataclass
class ObjectStoreSettings:
    """S3-compatible endpoint (MinIO by default) holding checkpoints."""

    endpoint: str = field(
        default_factory=lambda: os.environ.get("RFT_S3_ENDPOINT", "127.0.0.1:39000")
    )
    access_key: str = field(
        default_factory=lambda: os.environ.get("RFT_S3_ACCESS_KEY", DEV_ACCESS_KEY)
    )
    secret_key: str = field(
        default_factory=lambda: os.environ.get("RFT_S3_SECRET_KEY", DEV_SECRET_KEY)
    )
    bucket: str = "rft"
    secure: bool = False
    region: str | None = None
    # Where checkpoints live instead of `bucket` at `endpoint`: s3://bucket/prefix, or
    # file:///dir for a filesystem every process shares (one machine, NFS). None: the bucket.
    uri: str | None = None
    # Seconds a component keeps retrying once the object store, reached before, stops answering.
    outage_timeout: float = 300.0

    def __repr__(self) -> str:  # never print the secret
        return (
            f"ObjectStoreSettings(endpoint={self.endpoint!r}, bucket={self.bucket!r}, "
            f"uri={self.uri!r}, outage_timeout={self.outage_timeout!r}, "
            f"secure={self.secure}, access_key={self.access_key!r}, secret_key='***')"
        )


@dataclass
class LocalStackSettings:
    """Ports and data root of the stack that `rft stack up` provisions on this machine."""

    root: Path = field(default_factory=default_stack_root)
    kafka_port: int = 39092
    kafka_controller_port: int = 39093
    minio_port: int = 39000
    minio_console_port: int = 39001
    auto_start: bool = True  # `rft run` brings the local stack up when the endpoints are local


@dataclass
class StackSettings:
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    object_store: ObjectStoreSettings = field(default_factory=ObjectStoreSettings)
    local: LocalStackSettings = field(default_factory=LocalStackSettings)
