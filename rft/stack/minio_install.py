"""Obtaining the MinIO server binary.

Routes, first match wins (see `provision_route`):
1. `$RFT_MINIO_BIN` names a binary.
2. An earlier build of the pinned version in `<cache>/minio-<version>/bin/minio`.
3. `minio` on PATH.
4. Go on PATH: `GOBIN=<cache>/minio-<version>/bin go install github.com/minio/minio@<version>`
   (several minutes on first build; Go's module and build caches make later builds quick).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rft.errors import StackError
from rft.stack.provision_route import ProvisionContext, ProvisionRoute, obtain
from rft.stack.provision_step import run_step

MINIO_MODULE = "github.com/minio/minio"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"


def build_dir(ctx: ProvisionContext) -> Path:
    return ctx.cache / f"minio-{MINIO_VERSION}" / "bin"


@dataclass(frozen=True)
class EnvBinaryRoute:
    name: str = "RFT_MINIO_BIN"

    def existing(self, ctx: ProvisionContext) -> Path | None:
        value = ctx.env.get("RFT_MINIO_BIN")
        if not value:
            return None
        path = Path(value)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise StackError(f"RFT_MINIO_BIN={value} is not an executable file")
        return path

    def can_produce(self, ctx: ProvisionContext) -> bool:
        return False

    def produce(self, ctx: ProvisionContext) -> Path:
        raise StackError("RFT_MINIO_BIN is not set")


@dataclass(frozen=True)
class CachedBuildRoute:
    name: str = "cached-build"

    def existing(self, ctx: ProvisionContext) -> Path | None:
        binary = build_dir(ctx) / "minio"
        return binary if binary.is_file() else None

    def can_produce(self, ctx: ProvisionContext) -> bool:
        return False

    def produce(self, ctx: ProvisionContext) -> Path:
        raise StackError("no cached MinIO build")


@dataclass(frozen=True)
class PathBinaryRoute:
    name: str = "PATH"

    def existing(self, ctx: ProvisionContext) -> Path | None:
        found = ctx.which("minio")
        return Path(found) if found else None

    def can_produce(self, ctx: ProvisionContext) -> bool:
        return False

    def produce(self, ctx: ProvisionContext) -> Path:
        raise StackError("minio is not on PATH")


@dataclass(frozen=True)
class GoInstallRoute:
    name: str = "go-install"

    def existing(self, ctx: ProvisionContext) -> Path | None:
        return None  # a finished build is found by CachedBuildRoute

    def can_produce(self, ctx: ProvisionContext) -> bool:
        return ctx.which("go") is not None

    def produce(self, ctx: ProvisionContext) -> Path:
        gobin = build_dir(ctx)
        gobin.mkdir(parents=True, exist_ok=True)
        go = ctx.which("go") or "go"
        run_step(
            f"building MinIO {MINIO_VERSION} with `go install` (several minutes the first time)",
            [go, "install", f"{MINIO_MODULE}@{MINIO_VERSION}"],
            log_path=gobin.parent / "go-install.log",
            env={**ctx.env, "GOBIN": str(gobin)},
        )
        binary = gobin / "minio"
        if not binary.is_file():
            raise StackError(f"go install finished but {binary} is missing")
        return binary


MINIO_ROUTES: tuple[ProvisionRoute, ...] = (
    EnvBinaryRoute(),
    CachedBuildRoute(),
    PathBinaryRoute(),
    GoInstallRoute(),
)


def minio_binary(ctx: ProvisionContext) -> Path:
    try:
        return obtain(f"MinIO {MINIO_VERSION}", MINIO_ROUTES, ctx)
    except StackError as exc:
        if "no way to obtain" in str(exc):
            raise StackError(
                f"{exc}: install Go (to build MinIO), put `minio` on PATH, or set RFT_MINIO_BIN"
            ) from exc
        raise
