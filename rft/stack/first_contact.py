"""First contact: a component checks, before it starts work, that its configured Kafka and
object store answer at all, and fails in seconds naming the key and the address when they do not.

The outage window (`rft/stack/outage_window.py`) is for a service that went away; a service this
process has never reached is a config error (a typo'd host or port, a stack that was never
started), and waiting minutes for it would only hide that. So each component probes once at
startup, within FIRST_CONTACT_S, and from then on rides out outages.

Buckets: the trainer, which writes checkpoints, creates its bucket when it is missing (as the
checkpoint store always has); an explorer only reads, and a missing bucket means no version was
published yet. A bucket S3 refuses to create (a bad name, no permission) fails the trainer here.
"""

from __future__ import annotations

import socket

from rft.config.connections import KafkaSettings
from rft.errors import StorageError, UnreachableAddressError
from rft.stack.health import kafka_api_versions
from rft.storage.object_store_base import ObjectStore
from rft.storage.s3_object_store import S3ObjectStore

# Seconds one probe may take: a refused connection answers at once, a black hole takes this long.
FIRST_CONTACT_S = 5.0


def _host_port(address: str, key: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UnreachableAddressError(f"{key}: {address!r} is not host:port")
    return host.strip("[]"), int(port)


def require_kafka(settings: KafkaSettings, timeout_s: float = FIRST_CONTACT_S) -> None:
    """Some bootstrap server answers a Kafka ApiVersions request, or UnreachableAddressError
    naming `stack.kafka.bootstrap_servers` and what each address said."""
    key = "stack.kafka.bootstrap_servers"
    said = []
    for address in settings.bootstrap_servers.split(","):
        host, port = _host_port(address, key)
        probe = kafka_api_versions(host, port, timeout_s)
        if probe.ok:
            return
        said.append(probe.detail)
    raise UnreachableAddressError(
        f"{key}: no Kafka broker answers at {settings.bootstrap_servers} "
        f"({'; '.join(said)}); check the address, or start the stack (`rft stack up`)"
    )


def require_object_store(
    store: ObjectStore, *, create_bucket: bool, timeout_s: float = FIRST_CONTACT_S
) -> None:
    """The store answers (and, with `create_bucket`, its bucket exists or was created), or
    UnreachableAddressError naming the endpoint. Filesystem stores need no network probe."""
    if not isinstance(store, S3ObjectStore):
        if create_bucket:
            store.ensure_bucket()
        return
    key = "stack.object_store.endpoint"
    host, port = _host_port(store.endpoint, key)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise UnreachableAddressError(
            f"{key}: nothing answers at {store.endpoint} ({type(exc).__name__}: {exc}) for "
            f"{store.base_uri}; check the address, or start the stack (`rft stack up`)"
        ) from exc
    try:
        if create_bucket:
            store.ensure_bucket()
        else:
            store.exists("first-contact")  # a missing bucket is fine: nothing published yet
    except StorageError as exc:
        raise UnreachableAddressError(
            f"stack.object_store: {store.base_uri} at {store.endpoint} is not usable: {exc}"
        ) from exc
