"""docker-compose.yml, checked without Docker (no engine runs here, so no `docker compose
config`): valid against the Compose Specification's JSON schema (infra/compose/compose-spec.json,
vendored with its license in infra/compose/NOTICE.md), every image pinned to an exact version, the
services and ports the docs name, the wiring of endpoints and credentials, the collector config it
mounts, and Kafka settings that agree with the local stack's."""

from __future__ import annotations

import base64
import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from rft.config.connections import DEV_ACCESS_KEY, DEV_SECRET_KEY, LocalStackSettings
from rft.stack.kafka_config import SMALL_NODE_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "infra" / "compose" / "compose-spec.json"
# a tag naming one release: x.y.z (with a variant suffix) or a dated RELEASE tag; not `latest`,
# not `3.11-slim`, whose image changes under the same name
PINNED_TAG = re.compile(r":(\d+\.\d+\.\d+(-[a-z0-9.-]+)?|RELEASE\.\d{4}-\d\d-\d\dT[\dZ-]+)$")
DOCS = [ROOT / "README.md", ROOT / "docker-compose.yml", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def spec_errors(document: Any) -> list[str]:
    """Where and why `document` breaks the Compose Specification's schema."""
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
        for e in validator.iter_errors(document)
    ]


def test_the_file_is_valid_against_the_compose_specification(compose: dict[str, Any]) -> None:
    assert spec_errors(compose) == []


def test_the_schema_check_refuses_what_compose_refuses(compose: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    broken["services"]["kafka"]["ports"] = "39092"
    broken["services"]["minio"]["restart_policy"] = "always"  # a swarm key, not a service's
    broken["services"]["jaeger"]["depends_on"] = {"kafka": {"condition": "service_ready"}}
    errors = spec_errors(broken)
    assert [e.split(":")[0] for e in errors] == [
        "services/kafka/ports",
        "services/minio",
        "services/jaeger/depends_on",
    ], errors


def test_every_image_is_pinned_to_one_release(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        assert PINNED_TAG.search(service["image"]), f"{name}: {service['image']} is not pinned"


def test_the_services_and_ports_the_docs_name_are_the_files(compose: dict[str, Any]) -> None:
    services = compose["services"]
    named: dict[str, set[str]] = {}
    ui_ports: list[tuple[str, int]] = []
    for doc in DOCS:
        text = doc.read_text()
        for line in re.findall(r"docker compose up (?:-d )?([a-z][a-z -]*[a-z])", text):
            named.setdefault(doc.name, set()).update(line.split())
        ui_ports += [
            (doc.name, int(p))
            for p in re.findall(r"Jaeger (?:UI: http://127\.0\.0\.1:|\(port )(\d+)", text)
        ]
    assert named and ui_ports  # the docs do name them; a reworded page must keep a check
    for doc, names in named.items():
        assert names <= set(services), f"{doc} names {sorted(names - set(services))}"
    assert set(services) <= set().union(*named.values())  # and every service is documented
    for doc, port in ui_ports:
        assert port in _host_ports(services["jaeger"]), f"{doc}: Jaeger on {port}"


def _host_ports(service: dict[str, Any]) -> set[int]:
    return {int(str(p).split(":")[-2]) for p in service.get("ports", [])}


def test_all_services_present(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) >= {
        "kafka",
        "minio",
        "otel-collector",
        "jaeger",
        "publisher",
        "explorer",
        "trainer",
    }


def test_host_ports_match_the_local_stack(compose: dict[str, Any]) -> None:
    local = LocalStackSettings()
    services = compose["services"]
    assert local.kafka_port in _host_ports(services["kafka"])
    assert {local.minio_port, local.minio_console_port} <= _host_ports(services["minio"])
    for service in services.values():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{port} is exposed beyond localhost"


def test_kafka_is_kraft_with_the_local_small_node_settings(compose: dict[str, Any]) -> None:
    env = compose["services"]["kafka"]["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert compose["services"]["kafka"]["image"].endswith(":4.4.0")
    for key, value in SMALL_NODE_SETTINGS.items():
        env_key = "KAFKA_" + key.upper().replace(".", "_")
        assert str(env.get(env_key)) == value, env_key


def test_default_cluster_id_is_a_kafka_uuid(compose: dict[str, Any]) -> None:
    raw = compose["services"]["kafka"]["environment"]["CLUSTER_ID"]
    default = raw.split(":-", 1)[1].rstrip("}")
    assert len(base64.urlsafe_b64decode(default + "==")) == 16


def test_minio_credentials_come_from_the_rft_variables(compose: dict[str, Any]) -> None:
    env = compose["services"]["minio"]["environment"]
    assert env["MINIO_ROOT_USER"] == f"${{RFT_S3_ACCESS_KEY:-{DEV_ACCESS_KEY}}}"
    assert env["MINIO_ROOT_PASSWORD"] == f"${{RFT_S3_SECRET_KEY:-{DEV_SECRET_KEY}}}"


@pytest.mark.parametrize(
    ("service", "verb"), [("publisher", "publish"), ("explorer", "explore"), ("trainer", "train")]
)
def test_app_services_run_their_verb_against_the_compose_stack(
    compose: dict[str, Any], service: str, verb: str
) -> None:
    spec = compose["services"][service]
    assert spec["image"].startswith("python:3.1")
    assert f"rft {verb} --config" in " ".join(spec["command"])
    env = spec["environment"]
    assert env["RFT_KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert env["RFT_S3_ENDPOINT"] == "minio:9000"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert env["RFT_TRACE_EXPORTER"] == "otlp"
    # each process names itself rft-<component> (the resource rft builds wins over the variable),
    # so an OTEL_SERVICE_NAME here would be a setting that does nothing
    assert "OTEL_SERVICE_NAME" not in env
    default_config = env["RFT_CONFIG"].split(":-", 1)[1].rstrip("}")
    assert (ROOT / default_config).is_file(), default_config
    assert spec["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert spec["depends_on"]["minio"]["condition"] == "service_healthy"


def test_collector_config_is_mounted_and_wires_traces_to_jaeger(compose: dict[str, Any]) -> None:
    mounts = compose["services"]["otel-collector"]["volumes"]
    source = next(m.split(":")[0] for m in mounts if "otel-collector.yaml" in m)
    config = yaml.safe_load((ROOT / source).read_text())
    traces = config["service"]["pipelines"]["traces"]
    assert "otlp" in traces["receivers"]
    for exporter in traces["exporters"]:
        assert exporter in config["exporters"]
    assert config["exporters"]["otlp/jaeger"]["endpoint"].startswith("jaeger:")
    for pipeline in config["service"]["pipelines"].values():
        for name in pipeline.get("processors", []):
            assert name in config["processors"]


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    for service in compose["services"].values():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in declared, source
