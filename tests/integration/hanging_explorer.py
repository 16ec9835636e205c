"""An explorer process that stops inside a step's open transaction, for the SIGKILL test.

`python -m tests.integration.hanging_explorer CONFIG EXPLORER_ID N MARKER` runs the real
Explorer; at its first transactional commit from the Nth on that it makes while its explorer
group has another member and both hold task partitions, it flushes the step's experiences and offsets to the broker (inside
the still-open transaction), writes MARKER and sleeps until it is killed. Only the commit is held
back: everything the explorer does up to it is the real thing.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from consumers.explorer import Explorer
from consumers.run_plan import RunPlan
from rft.config import load_config
from rft.events.transport import kafka_backend
from rft.events.writer import EventWriter


def main(config: str, explorer_id: str, hang_at: int, marker: str) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = load_config(config)
    group = RunPlan(cfg).explorer_group
    commit = EventWriter.commit
    commits = 0

    def shared() -> bool:
        """The group has two members and each holds task partitions: they share the stream."""
        with kafka_backend(cfg.stack.kafka).admin() as admin:
            (described,) = admin.describe_groups([group])
        return len(described.members) >= 2 and all(m.assignment for m in described.members)

    def held_commit(self: EventWriter) -> None:
        nonlocal commits
        if self._transactional:
            commits += 1
            if commits >= hang_at and shared():
                self.flush()  # the records are on the broker, their transaction open
                Path(marker).write_text("transaction open\n")
                while True:
                    time.sleep(60)
        commit(self)

    EventWriter.commit = held_commit  # type: ignore[method-assign]
    Explorer(cfg, explorer_id=explorer_id, idle_timeout_s=120).run()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
