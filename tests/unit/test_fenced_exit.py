"""A fenced process exits with FENCED_EXIT_CODE, and `rft run`'s supervision names it as fenced
and starts nothing in its place (the process that fenced it holds its role)."""

from __future__ import annotations

import sys

from rft.cli.main import exit_code
from rft.errors import FENCED_EXIT_CODE, RftError, TransportError
from rft.events.transport import ConsumerFencedError, ProducerFencedError
from rft.storage.checkpoint_store import VersionTakenError
from rft.supervisor.process_group import ProcessGroup

SLEEPER = [sys.executable, "-c", "import time\nwhile True: time.sleep(0.1)"]


def test_every_fence_maps_to_the_fenced_exit_code_and_other_errors_do_not() -> None:
    fences = [
        ProducerFencedError("fenced: another process started with transactional id 'x'"),
        ConsumerFencedError("group.instance.id 'x' taken over"),
        VersionTakenError("v3 was created by another writer"),
    ]
    assert {exit_code(e) for e in fences} == {FENCED_EXIT_CODE}
    assert exit_code(TransportError("broker gone")) == 1
    assert exit_code(RftError("anything else")) == 1
    assert FENCED_EXIT_CODE not in (0, 1, 2, 130)  # usage errors, failures, Ctrl-C


def test_a_fenced_child_ends_the_group_named_as_fenced_and_is_not_restarted(tmp_path) -> None:
    group = ProcessGroup(log_dir=tmp_path)
    group.start("explorer", SLEEPER)
    fenced = f"import sys; print('rft train: error: fenced'); sys.exit({FENCED_EXIT_CODE})"
    group.start("trainer", [sys.executable, "-c", fenced])
    group.wait(poll_s=0.1)
    assert [c.name for c in group.children] == ["explorer", "trainer"]  # nothing started again
    assert group.exit_codes()["trainer"] == FENCED_EXIT_CODE
    (failure,) = [f for f in group.failures() if f.name == "trainer"]
    assert "fenced" in failure.what and "not restarted" in failure.what
    assert failure.last_lines == ["rft train: error: fenced"]
