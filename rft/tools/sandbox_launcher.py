"""The first program of a `python` tool run: it fences itself in, then becomes the user's program.

Run as `python -I sandbox_launcher.py LIMITS_JSON ISOLATION SCRIPT` by rft.tools.python_sandbox,
in a fresh session with the run's temporary directory as its working directory. It sets the
resource limits (CPU seconds, address space, file size, no core files), leaves the network by
entering a new, empty network namespace (ISOLATION "net": needs CAP_SYS_ADMIN; "user-net": through
a new user namespace, for unprivileged users where the kernel allows it), then execs a fresh
unbuffered interpreter on SCRIPT (-u: -I ignores PYTHONUNBUFFERED), which keeps the limits and the namespace. It imports nothing from rft, so
nothing of the parent's state reaches the user's program. Exit status 97 means fencing failed.
"""

import ctypes
import json
import os
import resource
import sys

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
FENCE_FAILED = 97


def main() -> None:
    limits = json.loads(sys.argv[1])
    isolation, script = sys.argv[2], sys.argv[3]
    try:
        cpu = int(limits["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        memory = int(limits["memory_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        file_size = int(limits["file_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        flags = {"net": CLONE_NEWNET, "user-net": CLONE_NEWUSER | CLONE_NEWNET}[isolation]
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(flags) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, ValueError, KeyError) as exc:
        sys.stderr.write(f"sandbox: cannot fence the process ({isolation}): {exc}\n")
        sys.exit(FENCE_FAILED)
    os.execv(sys.executable, [sys.executable, "-I", "-B", "-u", script])


if __name__ == "__main__":
    main()
