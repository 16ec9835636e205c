"""Where the event plane and the object store live: the `stack` section of a run config.

Defaults point at the local stack that `rft stack up` starts. Secrets come from the environment
(RFT_S3_ACCESS_KEY / RFT_S3_SECRET_KEY) or the config, never from code; the fallbacks below are the
documented development credentials of the local MinIO and nothing else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rft.config.fate import key

DEV_ACCESS_KEY = "rft-dev-access"
DEV_SECRET_KEY = "rft-dev-secret-key"
_PLAN = "consumers/run_plan.py"
_DERIVED = "rft/config/derived.py"


def default_stack_root() -> Path:
    return Path(os.environ.get("RFT_STACK_ROOT", Path.home() / ".cache" / "rft" / "stack"))


@dataclass
class KafkaSettings:
    """Kafka endpoint and topic defaults."""

    bootstrap_servers: str = key(
        field(default_factory=lambda: os.environ.get("RFT_KAFKA_BOOTSTRAP", "127.0.0.1:39092")),
        does="Kafka endpoint",
        shown_default="$RFT_KAFKA_BOOTSTRAP, else 127.0.0.1:39092",
        acts_in="rft/events/kafka_confluent.py",
        shown_by="tests/integration/test_transport_contract.py",
    )
    client: str = key(
        "confluent",
        does="KAFKA_BACKENDS: confluent or kafka-python",
        acts_in="rft/events/transport.py",
        shown_by="tests/integration/test_transport_contract.py",
    )
    partitions: int = key(
        4,
        does="partitions of the run's topics",
        acts_in="rft/events/topics.py",
        shown_by="tests/unit/test_topics.py",
    )
    replication_factor: int = key(
        1,
        does="replication of the run's topics",
        acts_in="rft/events/topics.py",
        shown_by="tests/unit/test_topics.py",
    )
    retention_ms: int = key(
        -1,
        does="retention of the run's topics (-1: forever, so the experience topic is a dataset)",
        acts_in="rft/events/topics.py",
        shown_by="tests/unit/test_topics.py",
    )
    schema_registry_url: str | None = key(
        None,
        does="a Confluent-compatible registry; refused: the event plane does not use one yet",
        acts_in=_DERIVED,
        shown_by="tests/unit/test_config_effects.py",
    )
    extra: dict[str, str] = key(
        field(default_factory=dict),
        does="client settings passed through to the Kafka client",
        acts_in="rft/events/kafka_confluent.py",
        shown_by="tests/unit/test_config_effects.py",
    )
    outage_timeout: float = key(
        300.0,
        does="seconds every component rides out an outage of a Kafka it reached before (retries with backoff, one log line as it starts and one as it ends) before exiting non-zero with the address (rft/stack/outage_window.py)",
        acts_in="rft/events/transport.py",
        shown_by="tests/faults/test_outages.py",
    )


@dataclass
class ObjectStoreSettings:
    """S3-compatible endpoint (MinIO by default) holding checkpoints."""

    endpoint: str = key(
        field(default_factory=lambda: os.environ.get("RFT_S3_ENDPOINT", "127.0.0.1:39000")),
        does="S3 endpoint of checkpoints",
        shown_default="$RFT_S3_ENDPOINT, else 127.0.0.1:39000",
        acts_in="rft/storage/s3_object_store.py",
        shown_by="tests/faults/test_checkpoint_crash.py",
    )
    access_key: str = key(
        field(default_factory=lambda: os.environ.get("RFT_S3_ACCESS_KEY", DEV_ACCESS_KEY)),
        does="S3 access key",
        shown_default="$RFT_S3_ACCESS_KEY, else the local stack's development key",
        acts_in="rft/storage/s3_object_store.py",
        shown_by="tests/integration/test_object_store_settings.py",
    )
    secret_key: str = key(
        field(default_factory=lambda: os.environ.get("RFT_S3_SECRET_KEY", DEV_SECRET_KEY)),
        does="S3 secret key (never printed)",
        shown_default="$RFT_S3_SECRET_KEY, else the local stack's development key",
        acts_in="rft/storage/s3_object_store.py",
        shown_by="tests/unit/test_config_loading.py",
    )
    bucket: str = key(
        "rft",
        does="bucket of checkpoints",
        acts_in="rft/storage/s3_object_store.py",
        shown_by="tests/integration/test_storage_contract.py",
    )
    secure: bool = key(
        False,
        does="https to the endpoint",
        acts_in="rft/storage/s3_object_store.py",
        shown_by="tests/unit/test_object_store_uri.py",
    )
    region: str | None = key(
        None,
        does="S3 region handed to the client",
        acts_in="rft/storage/s3_object_store.py",
        shown_by="tests/integration/test_object_store_settings.py",
    )
    uri: str | None = key(
        None,
        does="where checkpoints live instead of `bucket` at `endpoint`: s3://bucket/prefix, or file:///dir on a filesystem every process shares (one machine, NFS); None: the bucket",
        acts_in=_PLAN,
        shown_by="tests/unit/test_object_store_uri.py",
    )
    outage_timeout: float = key(
        300.0,
        does="seconds an object store outage is ridden out (uploads resent whole, downloads resumed; one log line as it starts and one as it ends) before exiting with the endpoint",
        acts_in="rft/storage/s3_object_store.py",
        shown_by="tests/faults/test_outages.py",
    )

    def __repr__(self) -> str:  # never print the secret
        return (
            f"ObjectStoreSettings(endpoint={self.endpoint!r}, bucket={self.bucket!r}, "
            f"uri={self.uri!r}, outage_timeout={self.outage_timeout!r}, "
            f"secure={self.secure}, access_key={self.access_key!r}, secret_key='***')"
        )


@dataclass
class LocalStackSettings:
    """Ports and data root of the stack that `rft stack up` provisions on this machine."""

    root: Path = key(
        field(default_factory=default_stack_root),
        does="data root of the local stack",
        shown_default="$RFT_STACK_ROOT, else ~/.cache/rft/stack",
        acts_in="rft/stack/local_stack.py",
        shown_by="tests/integration/test_stack.py",
    )
    kafka_port: int = key(
        39092,
        does="local Kafka port",
        acts_in="rft/stack/local_stack.py",
        shown_by="tests/integration/test_stack.py",
    )
    kafka_controller_port: int = key(
        39093,
        does="local KRaft controller port",
        acts_in="rft/stack/local_stack.py",
        shown_by="tests/integration/test_stack.py",
    )
    minio_port: int = key(
        39000,
        does="local MinIO port",
        acts_in="rft/stack/local_stack.py",
        shown_by="tests/integration/test_stack.py",
    )
    minio_console_port: int = key(
        39001,
        does="local MinIO console port",
        acts_in="rft/stack/local_stack.py",
        shown_by="tests/integration/test_stack.py",
    )
    zipkin_port: int = key(
        39411,
        does="local Zipkin port (trace store, query API and web UI; started only when asked)",
        acts_in="rft/stack/local_stack.py",
        shown_by="tests/integration/test_stack.py",
    )
    auto_start: bool = key(
        True,
        does="`rft run` brings the local stack up when the endpoints are local",
        acts_in="rft/supervisor/run_supervisor.py",
        shown_by="tests/unit/test_config_effects.py",
    )


@dataclass
class StackSettings:
    """`stack` (rft's own section): where Kafka and the object store are, and the local stack."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    object_store: ObjectStoreSettings = field(default_factory=ObjectStoreSettings)
    local: LocalStackSettings = field(default_factory=LocalStackSettings)
