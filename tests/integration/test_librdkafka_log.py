"""librdkafka's own log lines reach Python logging (`rft.events.kafka_confluent.librdkafka`) at
levels they deserve, instead of librdkafka printing them straight to stderr."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from rft.config.connections import KafkaSettings, StackSettings
from rft.errors import TransportError
from rft.events.kafka_confluent import (
    LIBRDKAFKA_LOG,
    ConfluentRecordProducer,
    LibrdkafkaLog,
)
from tests.integration.test_first_contact import closed_port
from tests.integration.test_transport_contract import make_topic

pytestmark = pytest.mark.integration


def lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LIBRDKAFKA_LOG.name]


def test_a_refused_connection_is_logged_through_python_not_printed(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    address = f"127.0.0.1:{closed_port()}"
    producer = ConfluentRecordProducer(KafkaSettings(bootstrap_servers=address), None, None)
    caplog.set_level(logging.DEBUG, logger=LIBRDKAFKA_LOG.name)
    producer.produce("t.nowhere", b"x")
    with pytest.raises(TransportError):
        producer.flush(2.0)  # serves the client's queued log lines while it waits
    refused = [r for r in lines(caplog) if "Connection refused" in r.getMessage()]
    assert refused, [r.getMessage() for r in caplog.records]
    assert address in refused[0].getMessage()
    assert refused[0].levelno == logging.ERROR  # librdkafka's level 3
    assert "Connection refused" not in capfd.readouterr().err


def test_debug_lines_of_a_client_at_the_real_broker_arrive_at_debug(
    stack: StackSettings, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    kafka = dataclasses.replace(stack.kafka, client="confluent")
    topic = make_topic(kafka, f"t.{unique}.log")
    caplog.set_level(logging.DEBUG, logger=LIBRDKAFKA_LOG.name)
    producer = ConfluentRecordProducer(kafka, None, {"debug": "broker"})
    producer.produce(topic, b"x")
    producer.flush(10.0)
    debug = [r for r in lines(caplog) if r.levelno == logging.DEBUG]
    assert debug and any(kafka.bootstrap_servers in r.getMessage() for r in debug)


def test_a_coordinator_still_loading_is_transient_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LIBRDKAFKA_LOG.name)
    hook = LibrdkafkaLog()
    # what librdkafka said at a fresh stack's first transactional start (its level 4)
    hook.log(
        logging.WARNING,
        "%s [%s] %s",
        "GETPID",
        "rdkafka#producer-3",
        "[thrd:main]: Failed to acquire transactional PID from broker TxnCoordinator/1: "
        "Broker: Coordinator load in progress: retrying",
    )
    hook.log(logging.WARNING, "%s [%s] %s", "SSL", "rdkafka#producer-3", "certificate expires")
    hook.log(logging.CRITICAL, "%s [%s] %s", "FATAL", "rdkafka#producer-3", "fenced")
    got = [(r.levelno, r.getMessage().split(" ")[0]) for r in lines(caplog)]
    assert got == [(logging.INFO, "GETPID"), (logging.WARNING, "SSL"), (logging.ERROR, "FATAL")]
