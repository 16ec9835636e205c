"""A config that points at a broker or an object store that is not there fails at startup, with
the key and the address, instead of waiting out `stack.*.outage_timeout` (first_contact.py): no
broker at the address, something at the address that is not Kafka, no MinIO at the address, and
buckets (the trainer creates a missing one, an explorer does not need it; one S3 refuses fails)."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rft.config.connections import KafkaSettings, StackSettings
from rft.contact.first_contact import require_kafka, require_object_store
from rft.errors import OutageError, UnreachableAddressError
from rft.stack.outage_window import forget_outages
from rft.stack.reached_addresses import remember_reached
from rft.storage import S3ObjectStore
from tests.integration.test_rft_loop import run_config

pytestmark = pytest.mark.integration


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_broker_at_the_address_is_a_config_error_naming_it() -> None:
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(UnreachableAddressError) as caught:
        require_kafka(KafkaSettings(bootstrap_servers=address))
    assert "stack.kafka.bootstrap_servers" in str(caught.value) and address in str(caught.value)


def test_an_address_that_answers_but_not_as_kafka_is_refused(stack: StackSettings) -> None:
    require_kafka(stack.kafka)  # the real broker passes
    minio = stack.object_store.endpoint.removeprefix("http://")
    with pytest.raises(UnreachableAddressError, match=minio):
        require_kafka(KafkaSettings(bootstrap_servers=minio))


def test_no_object_store_at_the_endpoint_is_a_config_error_naming_it(unique: str) -> None:
    endpoint = f"127.0.0.1:{closed_port()}"
    store = S3ObjectStore(dataclasses.replace(StackSettings().object_store, endpoint=endpoint))
    for create in (True, False):
        with pytest.raises(UnreachableAddressError) as caught:
            require_object_store(store, create_bucket=create)
        assert "stack.object_store.endpoint" in str(caught.value)
        assert endpoint in str(caught.value)


def test_a_missing_bucket_is_created_by_the_writer_only(stack: StackSettings, unique: str) -> None:
    settings = dataclasses.replace(stack.object_store, bucket=f"b{unique}")
    with S3ObjectStore(settings) as store:
        require_object_store(store, create_bucket=False)  # a reader: nothing published yet
        assert not store.client.bucket_exists(settings.bucket)
        require_object_store(store, create_bucket=True)  # the trainer: it will write there
        assert store.client.bucket_exists(settings.bucket)
        store.client.remove_bucket(settings.bucket)


def test_a_bucket_s3_refuses_fails_the_writer_naming_it(stack: StackSettings) -> None:
    settings = dataclasses.replace(stack.object_store, bucket="Not_A_Bucket")
    with S3ObjectStore(settings) as store, pytest.raises(UnreachableAddressError) as caught:
        require_object_store(store, create_bucket=True)
    assert "Not_A_Bucket" in str(caught.value) and store.endpoint in str(caught.value)


@pytest.mark.parametrize(
    ("verb", "key"),
    [("train", "stack.kafka.bootstrap_servers"), ("explore", "stack.object_store.endpoint")],
)
def test_components_exit_at_once_on_an_address_nothing_answers(
    stack: StackSettings, unique: str, tmp_path: Path, verb: str, key: str
) -> None:
    raw = run_config(stack, unique, tmp_path)
    nowhere = f"127.0.0.1:{closed_port()}"
    section = "kafka" if key.startswith("stack.kafka") else "object_store"
    raw["stack"][section]["bootstrap_servers" if section == "kafka" else "endpoint"] = nowhere
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(raw))
    # far less than the 300 s outage window a reached service would get
    done = subprocess.run(
        [sys.executable, "-m", "rft.cli.main", verb, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"rft {verb}: error: {key}" in done.stderr and nowhere in done.stderr


def test_an_address_reached_before_that_is_down_now_is_an_outage_ridden_out() -> None:
    """A process started while a broker it reached before is down (a supervisor restarting a
    trainer mid-outage) waits within stack.kafka.outage_timeout instead of failing at once, and
    past that limit ends with the outage, naming the service, the address and the key."""
    address = f"127.0.0.1:{closed_port()}"
    remember_reached("kafka", address)
    forget_outages()
    with pytest.raises(OutageError) as caught:
        require_kafka(KafkaSettings(bootstrap_servers=address, outage_timeout=3.0))
    message = str(caught.value)
    assert address in message and "stack.kafka.outage_timeout" in message
