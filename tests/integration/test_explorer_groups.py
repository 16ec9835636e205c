"""Explorer groups on the real broker.

- The transport: members with cooperative-sticky rebalancing hand over only the partitions that
  move (and say which), and a static member restarted within the session timeout takes its own
  partitions back without moving anyone else's.
- The explorers: on one task topic, a sharing group of two processes (same `explorer.name`) and a
  shadow group (`explorer.name: shadow`, `explorer.experiences_to: own`). Both groups see every
  task; the sharing group explores each task exactly once in the committed log even though one of
  its members is killed with SIGKILL while its step's transaction is open; the shadow group's
  experiences stay on its own topic and never reach the trainer, whose metrics break its rows down
  by explorer. `rft status` on the live run shows both groups and both live explorers.
"""

from __future__ import annotations

import time
from contextlib import ExitStack

import pytest

from rft.config.connections import StackSettings
from rft.events.models import Task
from rft.events.reader import EventReader
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter

pytestmark = pytest.mark.integration

COOPERATIVE = {"partition.assignment.strategy": "cooperative-sticky"}


def wait_until(what: str, check, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen in {timeout_s}s"


def member(stack: StackSettings, group: str, topic: str, instance: str) -> EventReader:
    return EventReader.open(
        stack.kafka,
        group,
        [topic],
        config={**COOPERATIVE, "group.instance.id": instance, "session.timeout.ms": 30_000},
    )


def test_cooperative_static_members_move_only_what_must_move(
    stack: StackSettings, unique: str
) -> None:
    topic, group = f"{unique}.tasks", f"{unique}.explorer.main"
    ensure_topics(stack.kafka, [topic], partitions={topic: 4})
    with EventWriter.open(stack.kafka) as w:
        for i in range(8):
            w.send(topic, Task(f"t{i}", "s", 0, i, {"q": i}), key=f"t{i}")
    with ExitStack() as live:
        first = live.enter_context(member(stack, group, topic, "m1"))
        wait_until(
            "the first member holds every partition",
            lambda: first.poll(10, 0.5) is not None and len(first.assignment()) == 4,
        )
        assert first.take_revoked() == set()
        second = member(stack, group, topic, "m2")

        def split() -> bool:
            first.poll(10, 0.2)
            second.poll(10, 0.2)
            return len(first.assignment()) == 2 and len(second.assignment()) == 2

        wait_until("the two members split the partitions", split)
        moved = set(second.assignment())
        # cooperative: the first member gave up exactly what moved, and kept the rest throughout
        assert first.take_revoked() == moved
        kept = set(first.assignment())
        assert kept.isdisjoint(moved) and len(kept | moved) == 4
        # a static member that closes does not leave its group: restarted with its instance id
        # within the session timeout, it gets its own partitions back and nothing else moves
        second.close()
        again = live.enter_context(member(stack, group, topic, "m2"))
        wait_until(
            "the restarted member holds its partitions",
            lambda: again.poll(10, 0.5) is not None and set(again.assignment()) == moved,
        )
        for _ in range(5):
            first.poll(10, 0.2)
        assert first.take_revoked() == set() and set(first.assignment()) == kept
