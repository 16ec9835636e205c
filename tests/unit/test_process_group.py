"""ProcessGroup: children are stopped together, a failing child stops the rest, memory is sampled
(also while children exit)."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from rft.supervisor.process_group import ProcessGroup, descendants

SLEEPER = [sys.executable, "-c", "import time\nwhile True: time.sleep(0.1)"]


def test_stop_ends_every_child_and_samples_memory(tmp_path) -> None:
    group = ProcessGroup(log_dir=tmp_path)
    group.start("a", SLEEPER)
    group.start("b", SLEEPER)
    time.sleep(1.5)
    assert len(group.running()) == 2
    group.stop(grace_s=5)
    assert group.running() == []
    assert group.peak_rss_bytes > 10 * 2**20  # two pythons and us
    assert (tmp_path / "a.log").exists()


def test_a_failing_child_stops_the_others(tmp_path) -> None:
    group = ProcessGroup(log_dir=tmp_path)
    group.start("sleeper", SLEEPER)
    group.start("crasher", [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"])
    group.wait(poll_s=0.1)
    assert group.running() == []
    codes = {c.name: c.returncode for c in group.children}
    assert codes["crasher"] == 3
    assert codes["sleeper"] is not None and codes["sleeper"] != 0  # stopped, not finished
    assert "boom" in (tmp_path / "crasher.log").read_text()


def test_a_process_gone_since_it_was_looked_up_has_no_descendants() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])  # noqa: S603
    looked_up = psutil.Process(child.pid)
    child.wait()  # exited and reaped: its pid names nothing now
    assert descendants(looked_up) == []
    assert descendants(psutil.Process()) != []  # a live one is listed


def test_memory_sampling_outlives_children_that_exit(tmp_path) -> None:
    group = ProcessGroup(log_dir=tmp_path)
    # a tree that keeps spawning short-lived grandchildren, and children that exit at once
    churn = "import subprocess, sys\nfor _ in range(40): subprocess.run([sys.executable, '-c', ''])"
    group.start("churn", [sys.executable, "-c", churn])
    for i in range(5):
        group.start(f"quick-{i}", [sys.executable, "-c", "pass"])
    while group.running():
        group.tree_rss()  # races the exits, as the sampler does
    time.sleep(1.2)  # two more samples after every child is gone
    assert group._sampler is not None and group._sampler.is_alive()
    assert group.tree_rss() > 0
    assert group.peak_rss_bytes > 0
    group.stop()
    assert {c.returncode for c in group.children} == {0}


def test_cpu_time_is_counted_per_child_including_a_grandchild_that_exited(tmp_path) -> None:
    """A child that spins for a second in a grandchild it waits for, then sleeps: its tree's
    CPU time keeps the grandchild's second after the grandchild is gone. A sleeper's stays near
    nothing."""
    spin = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass"
    parent = (
        "import subprocess, sys, time\n"
        f"subprocess.run([sys.executable, '-c', {spin!r}])\n"
        "time.sleep(30)"
    )
    group = ProcessGroup(log_dir=tmp_path)
    group.start("busy", [sys.executable, "-c", parent])
    group.start("idle", SLEEPER)
    deadline = time.monotonic() + 30
    while group.cpu_seconds().get("busy", 0.0) < 1.0 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # the grandchild has exited: two more samples without it
    used = group.cpu_seconds()
    group.stop(grace_s=5)
    assert used["busy"] >= 1.0  # the grandchild's second, kept after it exited
    assert used["idle"] < 0.5 * used["busy"]
    assert group.cpu_seconds()["busy"] >= used["busy"]  # after the stop: the last samples
