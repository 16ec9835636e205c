"""The first program of a `python` tool run: it fences itself in, then becomes the user's program.

Run as `python -I sandbox_launcher.py LIMITS_JSON ISOLATION SCRIPT` by rft.tools.python_sandbox, in
a fresh session with the run's temporary directory as its working directory. It sets the resource
limits (CPU seconds, address space, file size, no core files), enters new network and mount
namespaces (ISOLATION "net": needs CAP_SYS_ADMIN; "user-net": inside a new user namespace, for
unprivileged users where the kernel allows it), makes every mount read-only except the working
directory (mount_setattr, Linux 5.12+), empties the capability bounding set and sets
no_new_privs (so even uid 0 holds no capability to undo any of this), then execs a fresh unbuffered interpreter on SCRIPT (-u:
-I ignores PYTHONUNBUFFERED), which keeps the limits and the namespaces. The new network namespace
has no interface but a downed loopback, so nothing can be reached. It imports nothing from rft, so
none of the parent's state reaches the user's program. Exit status 97 means the fence failed.
"""

import ctypes
import errno
import json
import os
import resource
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 0x4000, 1 << 18
MOUNT_ATTR_RDONLY = 1
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
SYS_MOUNT_SETATTR = 442  # the same number on every architecture Linux added it for
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
FENCE_FAILED = 97


class MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("set", "clear", "propagation", "userns_fd")]


def fence(isolation: str, workdir: bytes) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def check(result: int, step: str) -> None:
        if result != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"{step}: {os.strerror(code)}")

    flags = {"net": 0, "user-net": CLONE_NEWUSER}[isolation] | CLONE_NEWNET | CLONE_NEWNS
    check(libc.unshare(flags), "unshare")
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
    read_only = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    check(
        libc.syscall(
            SYS_MOUNT_SETATTR,
            AT_FDCWD,
            b"/",
            AT_RECURSIVE,
            ctypes.byref(read_only),
            ctypes.sizeof(read_only),
        ),
        "make mounts read-only",
    )
    check(libc.mount(workdir, workdir, None, MS_BIND, None), "bind the working directory")
    check(libc.mount(None, workdir, None, MS_REMOUNT | MS_BIND, None), "make it writable")
    os.chdir(workdir)  # the old working directory still points below the read-only mount
    # Root (or the user namespace's root) could otherwise remount / writable or setns() back into
    # the host's network; with an empty bounding set, exec grants no capabilities, even to uid 0.
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
    cap = 0
    while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1
    if ctypes.get_errno() != errno.EINVAL or cap == 0:  # EINVAL: past the last capability
        check(-1, f"drop capability {cap}")


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
        fence(isolation, os.getcwd().encode())
    except (OSError, ValueError, KeyError) as exc:
        sys.stderr.write(f"sandbox: cannot fence the process ({isolation}): {exc}\n")
        sys.exit(FENCE_FAILED)
    os.execv(sys.executable, [sys.executable, "-I", "-B", "-u", script])


if __name__ == "__main__":
    main()
