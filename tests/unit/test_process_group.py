"""ProcessGroup: children are stopped together, a failing child stops the rest, memory is sampled."""

from __future__ import annotations

import sys
import time

from rft.supervisor.process_group import ProcessGroup

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
