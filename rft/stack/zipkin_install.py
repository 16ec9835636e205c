"""Obtaining the pinned Zipkin server: one executable jar (`io.zipkin:zipkin-server:<version>`,
classifier `exec`) that holds the trace store, the query API and the web UI.

Routes, first match wins (see `provision_route`):
1. `$RFT_ZIPKIN_JAR` names the jar.
2. Maven (`mvn` on PATH): `infra/zipkin/pom.xml` copies the jar from Maven Central into
   `<cache>/zipkin-<version>/lib` (about 131 MB, once).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from rft.errors import StackError
from rft.stack.provision_route import ProvisionContext, ProvisionRoute, obtain
from rft.stack.provision_step import run_step

ZIPKIN_VERSION = "3.5.1"
JAR_NAME = f"zipkin-server-{ZIPKIN_VERSION}-exec.jar"


def zipkin_pom() -> Path:
    return Path(str(resources.files("rft.infra.zipkin").joinpath("pom.xml")))


@dataclass(frozen=True)
class EnvJarRoute:
    name: str = "RFT_ZIPKIN_JAR"

    def existing(self, ctx: ProvisionContext) -> Path | None:
        value = ctx.env.get("RFT_ZIPKIN_JAR")
        if not value:
            return None
        if not Path(value).is_file():
            raise StackError(f"RFT_ZIPKIN_JAR={value} is not a file")
        return Path(value)

    def can_produce(self, ctx: ProvisionContext) -> bool:
        return False

    def produce(self, ctx: ProvisionContext) -> Path:
        raise StackError("RFT_ZIPKIN_JAR is not set")


@dataclass(frozen=True)
class MavenJarRoute:
    name: str = "maven"

    def lib(self, ctx: ProvisionContext) -> Path:
        return ctx.cache / f"zipkin-{ZIPKIN_VERSION}" / "lib"

    def existing(self, ctx: ProvisionContext) -> Path | None:
        jar = self.lib(ctx) / JAR_NAME
        return jar if jar.is_file() else None

    def can_produce(self, ctx: ProvisionContext) -> bool:
        return ctx.which("mvn") is not None

    def produce(self, ctx: ProvisionContext) -> Path:
        lib = self.lib(ctx)
        partial = lib.with_name("lib.partial")
        shutil.rmtree(partial, ignore_errors=True)
        lib.parent.mkdir(parents=True, exist_ok=True)
        run_step(
            f"fetching the Zipkin server {ZIPKIN_VERSION} jar from Maven Central with mvn",
            [
                ctx.which("mvn") or "mvn",
                "-q",
                "-B",
                "-f",
                str(zipkin_pom()),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={partial}",
            ],
            log_path=lib.parent / "mvn.log",
            env=ctx.env,
        )
        if not (partial / JAR_NAME).is_file():
            raise StackError(f"mvn finished but {partial} holds no {JAR_NAME}")
        # the rename marks the download complete: `existing` only trusts `lib`
        shutil.rmtree(lib, ignore_errors=True)
        os.replace(partial, lib)
        return lib / JAR_NAME


ZIPKIN_ROUTES: tuple[ProvisionRoute, ...] = (EnvJarRoute(), MavenJarRoute())


def zipkin_jar(ctx: ProvisionContext) -> Path:
    """The Zipkin server's executable jar, downloaded on first use."""
    return obtain(f"the Zipkin server {ZIPKIN_VERSION}", ZIPKIN_ROUTES, ctx)
