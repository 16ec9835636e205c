"""Rendering of the broker's server.properties and log4j2 config, and the cluster id."""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.errors import StackError
from rft.stack.kafka_config import (
    SMALL_NODE_SETTINGS,
    KafkaNodeConfig,
    load_or_create_cluster_id,
    new_cluster_id,
    parse_properties,
    render_log4j2_xml,
    render_server_properties,
)

ports = st.integers(min_value=1024, max_value=65535)


@given(port=ports, controller_port=ports, node_id=st.integers(1, 1000))
def test_properties_describe_one_combined_node(
    port: int, controller_port: int, node_id: int
) -> None:
    node = KafkaNodeConfig("127.0.0.1", port, controller_port, Path("/d/kafka"), node_id)
    props = parse_properties(render_server_properties(node))
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == str(node_id)
    assert props["controller.quorum.voters"] == f"{node_id}@127.0.0.1:{controller_port}"
    assert props["listeners"] == (
        f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}"
    )
    assert props["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{port}"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["log.dirs"] == "/d/kafka"
    for key, value in SMALL_NODE_SETTINGS.items():
        assert props[key] == value


def test_small_node_settings_make_groups_and_transactions_work_on_one_node() -> None:
    assert SMALL_NODE_SETTINGS["num.partitions"] == "4"
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "min.insync.replicas",
    ):
        assert SMALL_NODE_SETTINGS[key] == "1", key
    assert SMALL_NODE_SETTINGS["group.initial.rebalance.delay.ms"] == "0"


def test_every_listener_binds_localhost_only() -> None:
    props = parse_properties(
        render_server_properties(KafkaNodeConfig("127.0.0.1", 1, 2, Path("/x")))
    )
    for key in ("listeners", "advertised.listeners"):
        for listener in props[key].split(","):
            assert listener.split("://")[1].startswith("127.0.0.1:"), listener


def test_parse_properties_skips_comments_and_blank_lines() -> None:
    assert parse_properties("# c\n! c\n\n a = b \nno-separator\nk=v=w\n") == {"a": "b", "k": "v=w"}


def test_log4j2_config_is_xml_writing_under_the_log_dir(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs & more"  # a character XML must escape
    root = ET.fromstring(render_log4j2_xml(log_dir))
    appender = root.find("./Appenders/RollingFile")
    assert appender is not None
    assert appender.get("fileName") == str(log_dir / "server.log")
    assert root.find("./Loggers/Root").get("level") == "INFO"


def test_cluster_ids_are_kafka_uuids() -> None:
    for _ in range(500):
        cid = new_cluster_id()
        assert len(cid) == 22
        assert not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_cluster_id_is_created_once_then_reused(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "kafka-cluster.id"
    first = load_or_create_cluster_id(path)
    assert load_or_create_cluster_id(path) == first
    assert path.read_text().strip() == first


def test_bad_cluster_id_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "kafka-cluster.id"
    path.write_text("not-an-id\n")
    with pytest.raises(StackError, match=str(path)):
        load_or_create_cluster_id(path)
