"""Obtaining the jars of the pinned Apache Kafka broker.

Routes, first match wins (see `provision_route`):
1. `$KAFKA_HOME` names an existing install: its `libs/` is used as is.
2. Maven (`mvn` on PATH): `infra/kafka/pom.xml` copies the broker and a log4j2 binding from Maven
   Central into `<cache>/kafka-<version>/libs`.
3. The official release archive `kafka_2.13-<version>.tgz` from the Apache mirrors (needs internet),
   checked against its published SHA-512 and unpacked into the cache.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from rft.errors import StackError
from rft.stack.provision_route import ProvisionContext, ProvisionRoute, obtain
from rft.stack.provision_step import run_step

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.4.0"
SCALA_VERSION = "2.13"

ARCHIVE_NAME = f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}"
ARCHIVE_URLS: tuple[str, ...] = (
    f"https://downloads.apache.org/kafka/{KAFKA_VERSION}/{ARCHIVE_NAME}.tgz",
    f"https://archive.apache.org/dist/kafka/{KAFKA_VERSION}/{ARCHIVE_NAME}.tgz",
)

_BROKER_JAR = re.compile(r"^kafka_\d+\.\d+-.+\.jar$")


def broker_pom() -> Path:
    return Path(str(resources.files("rft.infra.kafka").joinpath("pom.xml")))


def has_broker_jar(libs: Path) -> bool:
    return libs.is_dir() and any(_BROKER_JAR.match(p.name) for p in libs.iterdir())


@dataclass(frozen=True)
class KafkaHomeRoute:
    name: str = "KAFKA_HOME"

    def existing(self, ctx: ProvisionContext) -> Path | None:
        home = ctx.env.get("KAFKA_HOME")
        if not home:
            return None
        libs = Path(home) / "libs"
        if not has_broker_jar(libs):
            raise StackError(f"KAFKA_HOME={home}: {libs} holds no kafka_<scala>-<version>.jar")
        return libs

    def can_produce(self, ctx: ProvisionContext) -> bool:
        return False

    def produce(self, ctx: ProvisionContext) -> Path:
        raise StackError("KAFKA_HOME is not set")


@dataclass(frozen=True)
class MavenRoute:
    name: str = "maven"

    def libs(self, ctx: ProvisionContext) -> Path:
        return ctx.cache / f"kafka-{KAFKA_VERSION}" / "libs"

    def existing(self, ctx: ProvisionContext) -> Path | None:
        libs = self.libs(ctx)
        return libs if has_broker_jar(libs) else None

    def can_produce(self, ctx: ProvisionContext) -> bool:
        return ctx.which("mvn") is not None

    def produce(self, ctx: ProvisionContext) -> Path:
        libs = self.libs(ctx)
        partial = libs.with_name("libs.partial")
        shutil.rmtree(partial, ignore_errors=True)
        mvn = ctx.which("mvn") or "mvn"
        run_step(
            f"fetching Apache Kafka {KAFKA_VERSION} jars from Maven Central with mvn",
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(broker_pom()),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={partial}",
            ],
            log_path=libs.parent / "mvn.log",
            env=ctx.env,
        )
        if not has_broker_jar(partial):
            raise StackError(f"mvn finished but {partial} holds no broker jar")
        # the rename is what marks the download complete: `existing` only trusts `libs`
        os.replace(partial, libs)
        return libs


def parse_sha512_file(text: str) -> str:
    """Hex digest from an Apache `.sha512` file, in either the `name: AB12 CD34 ...` layout
    (wrapped over several lines) or the `ab12cd34...  name` layout of sha512sum."""
    body = text.split(":", 1)[1] if ":" in text else text.split()[0]
    digest = re.sub(r"\s+", "", body).lower()
    if not re.fullmatch(r"[0-9a-f]{128}", digest):
        raise StackError(f"not a SHA-512 checksum file: {text.strip()[:120]!r}")
    return digest


@dataclass(frozen=True)
class ReleaseArchiveRoute:
    name: str = "release-archive"
    urls: tuple[str, ...] = ARCHIVE_URLS

    def home(self, ctx: ProvisionContext) -> Path:
        return ctx.cache / ARCHIVE_NAME

    def existing(self, ctx: ProvisionContext) -> Path | None:
        libs = self.home(ctx) / "libs"
        return libs if has_broker_jar(libs) else None

    def can_produce(self, ctx: ProvisionContext) -> bool:
        return True  # whether the mirrors are reachable is only known by trying

    def produce(self, ctx: ProvisionContext) -> Path:
        errors = []
        for url in self.urls:
            try:
                return self._download_and_unpack(url, ctx)
            except (OSError, urllib.error.URLError, tarfile.TarError, StackError) as exc:
                errors.append(f"{url}: {exc}")
        raise StackError(
            "could not download the Kafka release archive and mvn is not on PATH; install Maven, "
            "or set KAFKA_HOME to an unpacked Kafka install. Tried:\n  " + "\n  ".join(errors)
        )

    def _download_and_unpack(self, url: str, ctx: ProvisionContext) -> Path:
        log.info("downloading %s", url)
        ctx.cache.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url + ".sha512", timeout=60) as resp:
            expected = parse_sha512_file(resp.read().decode())
        with tempfile.TemporaryDirectory(dir=ctx.cache) as tmp:
            archive = Path(tmp) / f"{ARCHIVE_NAME}.tgz"
            digest = hashlib.sha512()
            with urllib.request.urlopen(url, timeout=60) as resp, open(archive, "wb") as out:
                while chunk := resp.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != expected:
                raise StackError(f"SHA-512 mismatch for {url}")
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            unpacked = Path(tmp) / ARCHIVE_NAME
            if not has_broker_jar(unpacked / "libs"):
                raise StackError(f"{url} unpacked without {ARCHIVE_NAME}/libs")
            home = self.home(ctx)
            shutil.rmtree(home, ignore_errors=True)
            os.replace(unpacked, home)
        return home / "libs"


KAFKA_ROUTES: tuple[ProvisionRoute, ...] = (KafkaHomeRoute(), MavenRoute(), ReleaseArchiveRoute())


def kafka_libs(ctx: ProvisionContext) -> Path:
    """The directory of broker jars, downloading them on first use."""
    return obtain(f"Apache Kafka {KAFKA_VERSION}", KAFKA_ROUTES, ctx)
