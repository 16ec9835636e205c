"""First contact: a component checks, before it starts work, that its configured Kafka and
object store answer at all, and fails in seconds naming the key and the address when they do not.

The outage window (`rft/stack/outage_window.py`) is for a service that went away; a service no
rft process on this machine has ever reached is a config error (a typo'd host or port, a stack
that was never started), and waiting minutes for it would only hide that. So each component
probes at startup, within FIRST_CONTACT_S: an address reached before (rft/stack/reached_addresses.py)
that does not answer now is an outage, ridden out within the service's outage window like any
other (a trainer a supervisor restarts while the broker is down waits for it instead of exiting
at once); an address never reached fails at once.

Buckets: the trainer, which writes checkpoints, creates its bucket when it is missing (as the
checkpoint store always has); an explorer only reads, and a missing bucket means no version was
published yet. A bucket S3 refuses to create (a bad name, no permission) fails the trainer here.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from rft.config.connections import KafkaSettings
from rft.errors import StorageError, UnreachableAddressError
from rft.stack.health import kafka_api_versions
from rft.stack.outage_window import OutageWindow, kafka_outage_window
from rft.stack.reached_addresses import remember_reached, was_reached
from rft.storage.object_store_base import ObjectStore
from rft.storage.s3_object_store import S3ObjectStore

# Seconds one probe may take: a refused connection answers at once, a black hole takes this long.
FIRST_CONTACT_S = 5.0
# Seconds between probes of an address reached before that is down now.
PROBE_INTERVAL_S = 2.0


def _first_contact(
    service: str, address: str, window: OutageWindow, probe: Callable[[], str | None]
) -> str | None:
    """`probe()` (None when the service answered, else what it said), retried within `window`
    while `address` is one reached before; the last answer when it never was."""
    said = probe()
    if said is None or not was_reached(service, address):
        return said
    while said is not None:
        window.failed(said)  # OutageError once the outage is older than the window
        time.sleep(PROBE_INTERVAL_S)
        said = probe()
    window.succeeded()
    return None


def _host_port(address: str, key: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UnreachableAddressError(f"{key}: {address!r} is not host:port")
    return host.strip("[]"), int(port)


def require_kafka(settings: KafkaSettings, timeout_s: float = FIRST_CONTACT_S) -> None:
    """Some bootstrap server answers a Kafka ApiVersions request, or UnreachableAddressError
    naming `stack.kafka.bootstrap_servers` and what each address said."""
    key = "stack.kafka.bootstrap_servers"
    addresses = [_host_port(a, key) for a in settings.bootstrap_servers.split(",")]

    def probe() -> str | None:
        said = []
        for host, port in addresses:
            answer = kafka_api_versions(host, port, timeout_s)
            if answer.ok:
                return None
            said.append(answer.detail)
        return "; ".join(said)

    # the window's limit, key and log lines are those of every other Kafka client's outage
    window = kafka_outage_window(settings)
    said = _first_contact("kafka", settings.bootstrap_servers, window, probe)
    if said is None:
        remember_reached("kafka", settings.bootstrap_servers)
        return
    raise UnreachableAddressError(
        f"{key}: no Kafka broker answers at {settings.bootstrap_servers} "
        f"({said}); check the address, or start the stack (`rft stack up`)"
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

    def probe() -> str | None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return None
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"

    said = _first_contact("object_store", store.endpoint, store.window, probe)
    if said is not None:
        raise UnreachableAddressError(
            f"{key}: nothing answers at {store.endpoint} ({said}) for "
            f"{store.base_uri}; check the address, or start the stack (`rft stack up`)"
        )
    remember_reached("object_store", store.endpoint)
    try:
        if create_bucket:
            store.ensure_bucket()
        else:
            store.exists("first-contact")  # a missing bucket is fine: nothing published yet
    except StorageError as exc:
        raise UnreachableAddressError(
            f"stack.object_store: {store.base_uri} at {store.endpoint} is not usable: {exc}"
        ) from exc
