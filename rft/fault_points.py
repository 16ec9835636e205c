"""Named points where a fault-injection run may pause a process, so a test can kill it there.

`RFT_FAULT_PAUSE=point:seconds[,point:seconds...]` makes `fault_point(point)` write one line,
`rft fault point <point>: pausing <seconds>s (pid <pid>)`, to stderr and sleep. Without the variable
(every normal run) a point costs one environment lookup. The points:

- `trainer.after_step`: an optimizer step is done in memory, its version not yet written;
- `checkpoint.upload`: a version's files start going up, on the checkpoint writer's thread, while
  the trainer goes on training (a pause here makes a slow store);
- `checkpoint.before_manifest`: a version's files are uploaded, its manifest not yet;
- `trainer.before_announce`: a version's manifest is written, its WeightVersion not yet sent;
- `explorer.in_transaction`: a step's experiences are sent in its transaction, not committed;
- `weight_group.answered`: an explorer's member of the weight-sync group answered a generation and
  has not made its end of the transport yet (the trainer's first broadcast waits for it).

The fault suite (`tests/faults/driver.py`) kills the process while it sleeps at one of them.
"""

from __future__ import annotations

import os
import sys
import time

ENV = "RFT_FAULT_PAUSE"


def pauses(spec: str | None) -> dict[str, float]:
    """`a:1.5,b:2` -> {"a": 1.5, "b": 2.0}; items without a number are ignored."""
    out: dict[str, float] = {}
    for item in (spec or "").split(","):
        point, _, seconds = item.strip().partition(":")
        try:
            out[point] = float(seconds)
        except ValueError:
            continue
    return out


def fault_point(name: str) -> None:
    """Pause here if `RFT_FAULT_PAUSE` names this point."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    seconds = pauses(spec).get(name)
    if seconds is None:
        return
    print(f"rft fault point {name}: pausing {seconds:g}s (pid {os.getpid()})", file=sys.stderr)
    sys.stderr.flush()
    time.sleep(seconds)
