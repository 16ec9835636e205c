"""The `python` tool's fence: limits, network, temporary directory, and the kill of the whole group.

These run real subprocesses (each well under the limits' few seconds). Where the machine cannot fence
a run, only the refusal is tested.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from rft.errors import ConfigError
from rft.tools import TOOLS, ToolCall, ToolExecutor, python_tool, sandbox_support
from rft.tools import python_sandbox as sandbox
from rft.tools.python_sandbox import SandboxLimits

SUPPORT = sandbox_support.sandbox_support()
fenced = pytest.mark.skipif(not SUPPORT.ok, reason=f"cannot fence here: {SUPPORT.reason}")
# A generous wall clock: on a loaded machine one second of CPU can take several seconds.
LIMITS = SandboxLimits(cpu_s=1, memory_mb=256, wall_s=20.0, output_bytes=2000)


def run_python(code: str, limits: SandboxLimits, isolation: str | None = None):
    return sandbox.run_python(code, limits, isolation or SUPPORT.isolation)


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def ends_soon(pid: int) -> bool:
    """Whether `pid` is gone within 10 s: SIGKILL is sent by the time run_python returns, and the
    kernel finishes the process a moment later."""
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


@fenced
def test_output_and_exit_status_come_back():
    run = run_python("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)", LIMITS)
    assert run.output.splitlines() == ["out", "err"]
    assert run.exit_code == 3
    assert run.report().endswith("[exit code 3]")


@fenced
def test_cpu_limit_stops_a_busy_loop():
    run = run_python("while True:\n    pass", LIMITS)
    assert run.signal in ("SIGXCPU", "SIGKILL")
    assert run.stopped == ""  # the kernel's CPU limit ended it, before the wall clock
    assert "CPU-time limit of 1 s" in run.report()


@fenced
def test_memory_limit_makes_a_large_allocation_fail():
    run = run_python("block = bytearray(1024 * 1024 * 1024)\nprint('allocated')", LIMITS)
    assert "MemoryError" in run.output
    assert "allocated" not in run.output
    assert run.exit_code == 1


@fenced
def test_wall_clock_limit_kills_the_whole_process_group():
    code = (
        "import subprocess, time\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    run = run_python(code, SandboxLimits(cpu_s=2, memory_mb=256, wall_s=2.0))
    assert run.stopped == "wall"
    assert "wall-clock limit of 2 s" in run.report()
    child = int(run.output.split()[0])
    assert ends_soon(child)


@fenced
def test_a_background_child_does_not_outlive_a_normal_exit():
    code = "import subprocess\nprint(subprocess.Popen(['sleep', '300']).pid)\n"
    run = run_python(code, LIMITS)
    assert run.exit_code == 0
    assert run.stopped == ""
    assert ends_soon(int(run.output.split()[0]))


@fenced
def test_output_beyond_the_limit_is_cut_and_the_program_stopped():
    run = run_python("while True:\n    print('y' * 100)", LIMITS)
    assert run.stopped == "output"
    assert run.output_truncated
    assert len(run.output.encode()) == LIMITS.output_bytes
    assert "output limit of 2000 bytes" in run.report()


@fenced
@pytest.mark.parametrize("isolation", sandbox.ISOLATIONS)
def test_the_network_is_unreachable_even_on_loopback(isolation):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    print('connected')\n"
            "except OSError as exc:\n"
            "    print('refused', exc.errno)\n"
        )
        run = run_python(code, LIMITS, isolation=isolation)
    if run.exit_code == sandbox.FENCE_FAILED and isolation != SUPPORT.isolation:
        pytest.skip(f"isolation {isolation!r} is not available here: {run.output.strip()}")
    assert run.output.startswith("refused")
    # The same connection from this process works: it is the fence that stops it.
    with socket.create_server(("127.0.0.1", 0)) as server:
        socket.create_connection(server.getsockname(), timeout=2).close()


@fenced
def test_each_run_has_its_own_temporary_directory_removed_afterwards():
    code = "import os\nopen('note.txt', 'w').write('x')\nprint(os.getcwd())\nprint(os.listdir('.'))"
    first = run_python(code, LIMITS).output.splitlines()
    second = run_python(code, LIMITS).output.splitlines()
    assert first[0] != second[0]
    assert "note.txt" in first[1]
    assert not Path(first[0]).exists()
    assert Path(first[0]).parent != Path(os.getcwd())


@fenced
def test_nothing_outside_the_run_directory_can_be_written(tmp_path):
    target = tmp_path / "escaped.txt"
    code = (
        "try:\n"
        f"    open({str(target)!r}, 'w').write('x')\n"
        "    print('written')\n"
        "except OSError as exc:\n"
        "    print('refused', exc.errno)\n"
        "print(open(__file__).read(5))\n"  # reading is allowed
    )
    run = run_python(code, LIMITS)
    assert run.output.splitlines()[0] == "refused 30"  # EROFS: the fence, not a permission
    assert not target.exists()
    assert run.output.splitlines()[1] == "try:"


@fenced
def test_the_program_holds_no_capability_to_undo_the_fence():
    code = (
        "import ctypes\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.mount(None, b'/', None, 32, None), ctypes.get_errno())\n"  # MS_REMOUNT, rw
    )
    capabilities, remount = run_python(code, LIMITS).output.splitlines()
    assert capabilities == "0" * 16
    assert remount == "-1 1"  # EPERM


@fenced
def test_the_registered_tool_reports_through_the_executor():
    executor = ToolExecutor.offering(["python"], timeout_s=30)
    result = executor.execute(ToolCall("python", '{"code": "print(6 * 7)"}', "c1"))
    assert (result.outcome, result.content) == ("ok", "42\n")
    spec = TOOLS.get("python").spec()["function"]
    assert f"{python_tool.DEFAULT_LIMITS.cpu_s} s of CPU" in spec["description"]


@fenced
def test_the_tool_names_its_own_limits_as_outcomes():
    executor = ToolExecutor.offering(["python"], timeout_s=60)
    flood = executor.execute(ToolCall("python", '{"code": "print(\'y\' * 10**7)"}', "c1"))
    assert flood.outcome == "truncated"
    assert f"output limit of {python_tool.DEFAULT_LIMITS.output_bytes} bytes" in flood.content
    spin = executor.execute(ToolCall("python", '{"code": "while True: pass"}', "c2"))
    assert spin.outcome == "timeout"
    # the CPU limit, or the wall clock first on a machine busy enough to starve the loop
    assert "CPU-time limit" in spin.content or "wall-clock limit" in spin.content
    failing = executor.execute(ToolCall("python", '{"code": "1/0"}', "c3"))
    assert failing.outcome == "ok"  # the program failed; the tool did its job
    assert "ZeroDivisionError" in failing.content


def test_a_fence_that_cannot_be_set_is_a_clear_failure():
    run = run_python("print('escaped')", LIMITS, isolation="no-such-isolation")
    assert run.exit_code == sandbox.FENCE_FAILED
    assert "cannot fence the process" in run.output
    assert "escaped" not in run.output


def test_python_is_refused_at_load_where_it_cannot_be_fenced(monkeypatch):
    if SUPPORT.ok:
        refusal = sandbox_support.SandboxSupport(False, "", "the probe said: no namespaces")
        monkeypatch.setattr(sandbox_support, "sandbox_support", lambda: refusal)
    with pytest.raises(ConfigError, match="tool 'python': "):
        ToolExecutor.offering(["python"])
    assert TOOLS.get("python").check_ready is sandbox_support.require_sandbox


def test_the_probe_explains_a_machine_where_no_fence_holds(monkeypatch):
    monkeypatch.setattr(sandbox_support, "ISOLATIONS", ("no-such-isolation",))
    support = sandbox_support.sandbox_support.__wrapped__()
    assert not support.ok
    assert support.reason.startswith("the python tool cannot fence its subprocess on this machine")
    assert "no-such-isolation: sandbox: cannot fence the process" in support.reason
