"""StatusAnnouncer: one process's ComponentStatus events on the control topic, and its wait lines.

A process says when it starts (`running`), when it finishes and why (`finished`, with the
numbers), and what it waits on while a wait lasts (`waiting`): the trainer learns from the
explorers' statuses that no more experiences can come, and `rft status` shows the newest status of
each process. A wait is logged and announced once it has lasted `first_after_s`, then at most every
`every_s` while it goes on (`WaitNotice`), so a long wait always says what it waits for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rft.errors import FencedError, TransportError
from rft.events.models import ComponentStatus
from rft.events.writer import EventWriter

log = logging.getLogger(__name__)

FIRST_WAIT_LINE_S = 5.0  # a wait shorter than this says nothing
WAIT_LINE_EVERY_S = 30.0  # a longer one says so at most this often


@dataclass
class StatusAnnouncer:
    """Sends this process's statuses; `transactional` writers send each in a transaction of
    its own (the caller has none open between steps, where statuses are sent)."""

    writer: EventWriter
    control_topic: str
    component: str
    instance: str
    group: str
    total_steps: int
    experience_topic: str = ""
    group_size: int = 0
    transactional: bool = False

    def announce(
        self,
        state: str,
        *,
        step: int,
        reason: str = "",
        detail: str = "",
        tasks_left: int = -1,
    ) -> ComponentStatus:
        status = ComponentStatus(
            component=self.component,
            instance=self.instance,
            group=self.group,
            state=state,
            reason=reason,
            detail=detail,
            step=step,
            total_steps=self.total_steps,
            experience_topic=self.experience_topic,
            group_size=self.group_size,
            tasks_left=tasks_left,
        )
        try:
            if self.transactional:
                self.writer.begin()
            self.writer.send(self.control_topic, status, key=self.instance)
            if self.transactional:
                self.writer.commit()
            else:
                self.writer.flush()
        except FencedError:
            # not a status lost but the process's role taken over: the caller must stop (a fence
            # swallowed here left a trainer retrying a dead producer for its whole outage window)
            raise
        except TransportError as exc:
            # a status informs; the run's data does not depend on it reaching the topic
            log.warning(
                "could not announce %s %s on %s: %s", state, detail, self.control_topic, exc
            )
            if self.transactional and self.writer.in_transaction:
                self._abort()
        return status

    def kafka_down(self) -> bool:
        """Whether this process has an open Kafka outage (its writer's outage window says so)."""
        window = self.writer.window
        return window is not None and window.down

    def _abort(self) -> None:
        """Abort a status's failed transaction: the caller's next one must not begin inside it."""
        try:
            self.writer.abort()
        except FencedError:
            raise
        except TransportError as exc:
            log.warning("could not abort the transaction of a status: %s", exc)

    def waits(self, step: int = 0) -> WaitNotice:
        return WaitNotice(self, step)


@dataclass
class WaitNotice:
    """One wait of one process. `still(what)` is called while it waits: the first call after
    FIRST_WAIT_LINE_S logs and announces `what`, then again at most every WAIT_LINE_EVERY_S, with
    `what` as it stands then. `over()` starts the next wait afresh."""

    announcer: StatusAnnouncer | None
    step: int = 0
    started: float = field(default_factory=time.monotonic)
    said_at: float | None = None
    said: str = ""

    def still(self, what: str | Callable[[], str], step: int | None = None) -> bool:
        """Log and announce `what` if due (a callable is asked only then); True when it did."""
        now = time.monotonic()
        waited = now - self.started
        if waited < FIRST_WAIT_LINE_S:
            return False
        if self.said_at is not None and now - self.said_at < WAIT_LINE_EVERY_S:
            return False
        text = what() if callable(what) else what
        self.said_at, self.said = now, text
        if step is not None:
            self.step = step
        line = f"waiting {waited:.0f}s for {text}"
        log.info("%s", line)
        if self.announcer is not None and not self.announcer.kafka_down():
            # while Kafka is away the line is logged only: announcing it would ride the outage
            # window inside the very wait it describes (a kafka-python trainer once sat 6 min in
            # one), and the next line after the outage says where the wait stands
            self.announcer.announce("waiting", step=self.step, detail=line)
        return True

    def over(self) -> None:
        self.started, self.said_at, self.said = time.monotonic(), None, ""
