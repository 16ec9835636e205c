"""Claims: which process holds a transactional id, as the log says.

A process that takes a transactional id (an explorer id, a run's trainer) fences every older
producer with it when it initialises, then commits a `Claim` (holder, a token of its own) on the
`control` topic in its first transaction. A producer can also be fenced by the broker itself: a
coordinator that restarted, or a transaction left open through an outage past
`transaction.timeout.ms`, bumps the producer's epoch, and the client reports it as a fence, in
the very words a takeover gets. The newest committed Claim of the id tells them apart: when it is
still this process's own, no other process claimed the id, and the producer may be replaced and
the id claimed again (`Claims.taken_over`). A takeover that has fenced this producer but not yet
committed its claim is given `CLAIM_GRACE_S` to do so; one slower than that fails its own first
commit (this process claims the id again first) and ends instead: either way exactly one goes on.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid

from rft.config.connections import KafkaSettings
from rft.errors import FencedError
from rft.events.models import Claim
from rft.events.reader import EventReader
from rft.events.topic_end import reached, topic_ends
from rft.events.writer import EventWriter

log = logging.getLogger(__name__)

# Seconds a fenced process waits before it reads the claims: a process taking the id over commits
# its claim right after it initialised (which is what fenced this one).
CLAIM_GRACE_S = 5.0
# Seconds the read of the claims may take (the control topic is small).
READ_LIMIT_S = 30.0


class Claims:
    """This process's claim of `holder`, kept on `topic`."""

    def __init__(self, kafka: KafkaSettings, topic: str, holder: str) -> None:
        self.kafka = kafka
        self.topic = topic
        self.holder = holder
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def claim(self, writer: EventWriter) -> None:
        """Claim the id through `writer` (its producer has this transactional id): one
        transaction holding the Claim; an older holder is fenced when the producer initialises."""
        writer.begin()
        writer.send(
            self.topic,
            Claim(self.holder, self.token, socket.gethostname(), os.getpid()),
            key=self.holder,
        )
        writer.commit()

    def reclaim(self, writer: EventWriter) -> None:
        """After a fence the broker made: a new producer (which fences the old epoch) and a new
        claim."""
        writer.reclaim()
        self.claim(writer)
        log.warning(
            "%s: fenced by the broker, not by another process (the newest claim of the id is this "
            "process's own): the producer is replaced and the id claimed again",
            self.holder,
        )

    def hold(self, writer: EventWriter) -> None:
        """Claim the id again: a takeover raises FencedError; a fence the broker made on its own
        replaces the producer and goes on."""
        try:
            self.claim(writer)
        except FencedError:
            if self.taken_over():
                raise
            self.reclaim(writer)

    def taken_over(self, grace_s: float = CLAIM_GRACE_S) -> bool:
        """Whether another process claimed the id after this one (True also when the claims
        cannot be read: the fence then stands)."""
        time.sleep(grace_s)
        newest = self.newest()
        if newest is None:
            log.warning("%s: no claim of the id found on %s", self.holder, self.topic)
            return True
        if newest.token != self.token:
            log.info("%s: claimed since by %s (pid %d)", self.holder, newest.host, newest.pid)
            return True
        return False

    def newest(self) -> Claim | None:
        """The newest committed Claim of the id, read from `topic`'s start to its stable end."""
        ends = topic_ends(self.kafka, [self.topic])
        found: Claim | None = None
        group = f"{self.holder}.claims.{uuid.uuid4().hex[:8]}"  # a reader of its own, no commits
        deadline = time.monotonic() + READ_LIMIT_S
        with EventReader.open(self.kafka, group, [self.topic], from_beginning=True) as reader:
            while time.monotonic() < deadline:
                for env in reader.poll(500, timeout_s=0.5):
                    event = env.event
                    if isinstance(event, Claim) and event.holder == self.holder:
                        found = event  # one key, one partition: later offsets are newer
                if reached(reader, ends):
                    return found
        log.warning("%s: the claims on %s were not read to their end", self.holder, self.topic)
        return None
