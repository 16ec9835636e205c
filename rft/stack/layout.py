"""Where the local stack keeps things: data, logs, pid files and rendered configs under the root,
downloaded and built artefacts under the cache.

The cache is separate from the root so that a throwaway root (a test, a second stack on other
ports) reuses the jars and binaries instead of fetching them again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rft.config.connections import default_stack_root


def default_cache_dir() -> Path:
    """`$RFT_STACK_CACHE`, else `cache/` under the default stack root."""
    env = os.environ.get("RFT_STACK_CACHE")
    return Path(env) if env else default_stack_root() / "cache"


@dataclass(frozen=True)
class StackLayout:
    root: Path
    cache: Path

    @property
    def lock_file(self) -> Path:
        return self.root / "stack.lock"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def leases(self) -> Path:
        return self.root / "leases"

    def pid_file(self, service: str) -> Path:
        return self.run / f"{service}.pid"

    def data(self, service: str) -> Path:
        return self.root / "data" / service

    def config(self, service: str) -> Path:
        return self.root / "config" / service

    def create(self) -> None:
        for path in (self.root, self.cache, self.logs, self.run, self.leases):
            path.mkdir(parents=True, exist_ok=True)
