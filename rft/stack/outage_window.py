"""The outage window: how a process rides out an unreachable Kafka or object store.

Every client wrapper (Kafka producers and consumers, the S3 object store) hands its failed
attempts here. One window per (service, address) is shared by the whole process, so an outage
opens once and closes once however many clients notice it: the first failure logs one line
("kafka at 127.0.0.1:39092 unreachable since ..., retrying for up to 300 s"), the first success
after it logs one line ("... reachable again after 21 s"), and the retries in between log
nothing. Past `timeout_s` the next failure raises OutageError naming the service, the address and
the config key that sets the limit.

A retry happens only when the caller says the failed attempt lost nothing (`retriable`): records
still queued in the producer, a transaction step that timed out, an upload that can be sent
again from its start. Whether an attempt counts as done is the wrapper's call; this module only
decides how long to keep trying and what to say.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from rft.config.connections import KafkaSettings
from rft.errors import OutageError

log = logging.getLogger(__name__)

T = TypeVar("T")

# Waits between attempts: doubling from the first to the cap, never past the window's end.
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 5.0
# A failure this soon after a recovery continues the same outage in the log: a service coming
# back often answers one client (metadata) before another (a transaction coordinator).
FLAP_GRACE_S = 30.0


@dataclass
class _ServiceState:
    """What the process knows of one (service, address): shared by all its windows."""

    lock: threading.Lock
    down_since: float | None = None  # monotonic time of the first failure of the open outage
    down_since_wall: float = 0.0
    announced: bool = False  # the open outage's "unreachable" line was logged
    recovered_at: float | None = None
    last_error: str = ""


_STATES: dict[tuple[str, str], _ServiceState] = {}
_STATES_LOCK = threading.Lock()


def _state_for(service: str, address: str) -> _ServiceState:
    with _STATES_LOCK:
        state = _STATES.get((service, address))
        if state is None:
            state = _STATES[(service, address)] = _ServiceState(threading.Lock())
        return state


def backoff_s(attempt: int) -> float:
    """The wait after failed attempt number `attempt` (0-based): 0.5, 1, 2, 4, 5, 5, ... s."""
    return min(BACKOFF_FIRST_S * (2 ** min(attempt, 16)), BACKOFF_MAX_S)


class OutageWindow:
    """How long one client keeps retrying `service` at `address` (`key` sets `timeout_s`)."""

    def __init__(
        self,
        service: str,
        address: str,
        timeout_s: float,
        key: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.service = service
        self.address = address
        self.timeout_s = float(timeout_s)
        self.key = key
        self._clock = clock
        self._wall_clock = wall_clock
        self._sleep = sleep
        self._state = _state_for(service, address)

    @property
    def down(self) -> bool:
        """An outage of this service is open in this process."""
        return self._state.down_since is not None

    def down_for(self) -> float:
        since = self._state.down_since
        return 0.0 if since is None else self._clock() - since

    def failed(self, error: str) -> None:
        """Record a failed attempt: opens the outage (one log line) if none is open; raises
        OutageError once the outage is older than `timeout_s`."""
        state, now = self._state, self._clock()
        with state.lock:
            state.last_error = error
            if state.down_since is None:
                state.down_since, state.down_since_wall = now, self._wall_clock()
                flapped = state.recovered_at is not None and now - state.recovered_at < FLAP_GRACE_S
                state.announced = not flapped
                if state.announced:
                    since = time.strftime("%H:%M:%S UTC", time.gmtime(state.down_since_wall))
                    log.warning(
                        "%s at %s unreachable since %s, retrying for up to %g s (%s): %s",
                        self.service,
                        self.address,
                        since,
                        self.timeout_s,
                        self.key,
                        error,
                    )
            down_for = now - state.down_since
            since_wall = state.down_since_wall
        if down_for >= self.timeout_s:
            since = time.strftime("%H:%M:%S UTC", time.gmtime(since_wall))
            raise OutageError(
                f"{self.service} at {self.address} unreachable since {since} ({down_for:.0f} s, "
                f"past {self.key} = {self.timeout_s:g} s); last error: {error}"
            )

    def succeeded(self) -> None:
        """Record a successful attempt: closes an open outage (one log line if it was opened
        with one)."""
        state = self._state
        if state.down_since is None:  # the common case, without the lock
            return
        now = self._clock()
        with state.lock:
            if state.down_since is None:
                return
            down_for = now - state.down_since
            if state.announced:
                log.warning(
                    "%s at %s reachable again after %.0f s", self.service, self.address, down_for
                )
            state.down_since, state.announced, state.recovered_at = None, False, now

    def remaining_s(self) -> float:
        """Seconds left before an open outage outlives the window (the whole window if none)."""
        return max(self.timeout_s - self.down_for(), 0.0)

    def call(
        self,
        what: str,
        attempt: Callable[[], T],
        retriable: Callable[[Exception], bool],
        *,
        proves_reachable: bool = True,
    ) -> T:
        """`attempt()` until it succeeds, retrying failures that `retriable` accepts with
        backoff; other failures propagate at once, and an outage older than the window ends in
        OutageError. `what` names the operation in the log and the error. An attempt that may
        succeed without the service answering (a client's local bookkeeping: beginning a
        transaction) passes `proves_reachable=False`: its success leaves an open outage open."""
        tries, started = 0, self._clock()
        while True:
            try:
                result = attempt()
            except Exception as exc:
                if not retriable(exc):
                    raise
                self.failed(f"{what}: {exc}")
                # The outage is the process's: another client's success closes it, so a call
                # that keeps failing while others get through (a producer left in a state it
                # cannot leave) would never see it expire. The call's own time is bounded too.
                failing_s = self._clock() - started
                if failing_s >= self.timeout_s:
                    raise OutageError(
                        f"{self.service} at {self.address} unreachable for {what}: failing for "
                        f"{failing_s:.0f} s, past {self.key} = {self.timeout_s:g} s, while other "
                        f"calls of this process succeeded; last error: {exc}"
                    ) from exc
                left = min(self.remaining_s(), self.timeout_s - failing_s)
                self._sleep(min(backoff_s(tries), max(left, 0.05)))
                tries += 1
                continue
            if proves_reachable:
                self.succeeded()
            return result


def kafka_outage_window(settings: KafkaSettings, timeout_s: float | None = None) -> OutageWindow:
    """The process's outage window for this cluster (default limit: its outage_timeout)."""
    return OutageWindow(
        "kafka",
        settings.bootstrap_servers,
        settings.outage_timeout if timeout_s is None else timeout_s,
        "stack.kafka.outage_timeout",
    )


def forget_outages() -> None:
    """Drop what the process knows of every service (tests that reuse addresses)."""
    with _STATES_LOCK:
        _STATES.clear()
