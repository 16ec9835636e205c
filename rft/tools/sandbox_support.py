"""Whether the `python` tool can run fenced on this machine, probed once per process.

`sandbox_support()` runs one probe program through rft.tools.python_sandbox, under each isolation
in turn, and reports the first whose limits and fence hold; `require_sandbox()` turns a failure
into the ConfigError that a config selecting `python` is refused with at load.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rft.errors import ConfigError
from rft.tools.python_sandbox import ISOLATIONS, SandboxLimits, run_python


@dataclass(frozen=True)
class SandboxSupport:
    """Whether `python` runs can be fenced here, with which isolation, and if not, why not."""

    ok: bool
    isolation: str
    reason: str


_PROBE = """
import os, resource, socket
port = PORT
limits = [resource.getrlimit(r)[0] for r in (resource.RLIMIT_CPU, resource.RLIMIT_AS)]
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    network = "reachable"
except OSError:
    network = "unreachable"
open("own", "w").close()
try:
    open(os.path.join(os.path.dirname(os.getcwd()), "rft-sandbox-escape"), "w").close()
    outside = "writable"
except OSError:
    outside = "read-only"
caps = [line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff")]
print(network, outside, "caps=" + caps[0], *limits)
"""


@functools.cache
def sandbox_support() -> SandboxSupport:
    """Probe, once per process, whether a fenced run works: its CPU and memory limits are in force,
    a TCP server listening on this host's loopback cannot be reached from inside, its directory is
    writable and the one above it is not, and it holds no capability."""
    if not (sys.platform.startswith("linux") and hasattr(os, "killpg")):
        return SandboxSupport(False, "", f"the python tool needs Linux; this is {sys.platform}")
    limits = SandboxLimits(cpu_s=5, memory_mb=512, wall_s=30.0)
    failures = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        for isolation in ISOLATIONS:
            run = run_python(_PROBE.replace("PORT", str(port)), limits, isolation)
            memory = limits.memory_mb * 1024 * 1024
            expected = f"unreachable read-only caps={'0' * 16} {limits.cpu_s} {memory}"
            Path(tempfile.gettempdir(), "rft-sandbox-escape").unlink(missing_ok=True)
            if run.exit_code == 0 and run.output.strip() == expected:
                return SandboxSupport(True, isolation, "")
            failures.append(f"{isolation}: {run.output.strip() or run.report()}")
    return SandboxSupport(
        False,
        "",
        "the python tool cannot fence its subprocess on this machine (it needs RLIMIT_CPU, "
        "RLIMIT_AS, new network and mount namespaces, mount_setattr (Linux 5.12+) and "
        "dropping capabilities: as root, or as a user where unprivileged user namespaces "
        "are allowed); "
        "the probe said: " + "; ".join(failures),
    )


def fenced_isolation() -> str:
    """The isolation that works here; ConfigError naming the tool when none does."""
    require_sandbox()
    return sandbox_support().isolation


def require_sandbox() -> None:
    """ConfigError with the probe's sentence when the `python` tool cannot run fenced here."""
    support = sandbox_support()
    if not support.ok:
        raise ConfigError(f"tool 'python': {support.reason}")
