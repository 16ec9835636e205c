"""An explorer process for the SIGKILL test: the real Explorer, with two holds around it.

`python -m tests.integration.hanging_explorer CONFIG EXPLORER_ID HANG_AT MARKER WAIT_FOR IDLE_S [HOLD]`

- With WAIT_FOR `ready:ID` it subscribes (its consumer joins the group on its first poll) only
  once explorer ID has started up too (each writes MARKER.<its id>.ready when it reaches its first
  poll), and after that first poll it waits until the group has both members: whichever joined
  first then gives up partitions at its next poll and the two share the tasks, instead of a fast
  one exploring everything (seconds on an idle machine) before the other has joined; such a
  member also polls at most every half second. With
  `other-commit` it waits until another member has committed a step; with `none` not at all.
- With HANG_AT > 0, at its HANG_AT-th transactional commit it flushes the step's experiences and
  offsets to the broker (inside the still-open transaction), writes MARKER and sleeps until it is
  killed.
- With HOLD `second-step` it waits before its second step's tasks (its first step's metric is
  out), and with `after-marker` before its first step after MARKER exists once it has committed
  a step of its own (a member that joined after the other took every partition gets its share
  only when that one is gone), until MARKER.release exists: a live member with a step metric,
  no transaction open, that the test looks at before it lets it go on (explorers finish within
  seconds on a fast machine).

Only these holds are added: everything the explorer does is the real thing.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path

from rft.catalog import load_config
from rft.consumers.explorer.explorer import Explorer
from rft.consumers.run_plan import RunPlan
from rft.events.reader import Envelope, EventReader
from rft.events.transport import kafka_backend
from rft.events.writer import EventWriter


def main(
    config: str,
    explorer_id: str,
    hang_at: int,
    marker: str,
    wait_for: str,
    idle: float,
    hold: str = "none",
) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = load_config(config)
    group = RunPlan(cfg).explorer_group

    def others_explore() -> bool:
        """Another member of the group has committed a step of its own: they share the tasks."""
        with kafka_backend(cfg.stack.kafka).admin() as admin:
            committed = admin.group_offsets(group)
        return any(explorer_id not in o.metadata for o in committed if o.metadata)

    def members() -> int:
        with kafka_backend(cfg.stack.kafka).admin() as admin:
            (described,) = admin.describe_groups([group])
        return len(described.members)

    def ready() -> bool:
        if wait_for.startswith("ready:"):  # another member's start-up is done
            return Path(f"{marker}.{wait_for.removeprefix('ready:')}.ready").exists()
        return wait_for == "none" or others_explore()

    poll_batch = Explorer._poll_batch
    gated = False
    polls = 0
    steps = 0  # steps this member committed

    def held_here() -> bool:
        if hold == "second-step":
            return polls == 2
        return hold == "after-marker" and Path(marker).exists() and steps > 0

    def gated_poll(self: Explorer, tasks: EventReader, stop: threading.Event) -> list[Envelope]:
        nonlocal gated, hold, polls
        Path(f"{marker}.{explorer_id}.ready").write_text("started up\n")
        deadline = time.monotonic() + 300
        while not gated and not ready():
            assert time.monotonic() < deadline, f"{group}: {wait_for} did not happen"
            time.sleep(0.5)
        gated = True
        polls += 1
        if held_here():
            hold = "none"  # once
            print(f"explorer {explorer_id}: held before step {polls}", flush=True)
            while not Path(f"{marker}.release").exists():
                assert time.monotonic() < deadline + 600, f"{explorer_id}: never released"
                time.sleep(0.2)
        if wait_for.startswith("ready:"):
            # paced: on an idle machine a member runs all its steps in a few seconds, before a
            # rebalance could give the other its share; a poll every half second lets it happen
            time.sleep(0.5)
        batch = poll_batch(self, tasks, stop)
        if polls == 1 and wait_for.startswith("ready:"):
            while members() < 2:  # this one has joined; the other is on its way
                assert time.monotonic() < deadline, f"{group}: the other member never joined"
                time.sleep(0.2)
        return batch

    commit = EventWriter.commit
    commits = 0

    def held_commit(self: EventWriter) -> None:
        nonlocal commits, steps
        # a step's commit carries task offsets; the empty one claiming the explorer id does not
        is_step = self._transactional and bool(self._offsets_sent)
        if is_step and hang_at > 0:
            commits += 1
            if commits >= hang_at:
                self.flush()  # the records are on the broker, their transaction open
                Path(marker).write_text("transaction open\n")
                while True:
                    time.sleep(60)
        commit(self)
        steps += int(is_step)

    Explorer._poll_batch = gated_poll  # type: ignore[method-assign]
    EventWriter.commit = held_commit  # type: ignore[method-assign]
    summary = Explorer(cfg, explorer_id=explorer_id, idle_timeout_s=idle).run()
    print(f"explorer {explorer_id}: {summary.tasks} tasks in {summary.steps} steps")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], args[1], int(args[2]), args[3], args[4], float(args[5]), *args[6:7])
