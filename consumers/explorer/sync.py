"""ExplorerSync: when an explorer loads new weights, and what it does while it waits for them.

Before each step the explorer asks its sync style (rft.synchronizer) which version the step needs:
`fixed`'s schedule and the η bound (`synchronizer.max_head_offpolicyness`) are requirements, and
the explorer does not roll out until it holds that version. It waits on the weights topic; each
time `synchronizer.sync_timeout` passes without the version it counts a timeout
(`sync_timeouts_total`) and, as `synchronizer.on_sync_timeout` says, warns and keeps waiting
(`wait`) or stops with SyncTimeoutError (`stop`). It never goes on with older weights. A version
that fails verification does not satisfy a requirement: the explorer waits for a newer one.

A SyncRequest (`dynamic_by_explorer`) is a wish: the trainer may have nothing newer, so an
unanswered request is counted (`sync_request_timeouts_total`) and the step goes on. Under the η
bound a request style also asks whenever it needs a version it lacks, or it would wait forever.

A wait that lasts says what it waits on (the version, the weights topic, what the explorer holds)
in the log and as a `waiting` status on the control topic, at most every 30 s
(rft.producers.status_announcer).

`fully_async` also loads a newly announced version between the rollout chunks of a step
(`between_rollouts`); each chunk's tasks record the version they were sampled with.

An engine whose entry says it cannot load weights (`loads_weights: False`: its weights live in a
server it calls) is never given a version and never waited for: the explorer cannot make its
server load one. Each chunk's tasks then record the oldest version the server said answered the
chunk's calls (`after_rollouts`), and staleness is judged by the trainer on those versions.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from rft.config.schema import SynchronizerConfig
from rft.consumers.explorer.weight_follower import WeightFollower
from rft.engines.rollout import RolloutEngine
from rft.errors import RftError
from rft.events.models import SyncRequest
from rft.events.writer import EventWriter
from rft.producers.status_announcer import FIRST_WAIT_LINE_S, StatusAnnouncer, WaitNotice
from rft.synchronizer import SyncStyle

log = logging.getLogger(__name__)


class SyncTimeoutError(RftError):
    """A weight version an explorer step needs did not arrive in time (on_sync_timeout: stop)."""


@dataclass
class SyncCounters:
    """Running totals of one explorer's weight syncs, reported with every step's metrics."""

    wait_s: float = 0.0
    timeouts: int = 0
    request_timeouts: int = 0
    loads: int = 0


@dataclass
class StepSync:
    """What happened before (and, for fully_async, during) one explorer step."""

    step: int
    required: int  # the version the step needed (0: none)
    newest_at_start: int  # newest version announced when the step began rolling out
    wait_s: float = 0.0
    loads_in_step: int = 0
    task_versions: dict[str, int] = field(default_factory=dict)  # task id -> sampling version

    def metrics(self, counters: SyncCounters) -> dict[str, float]:
        return {
            "required_version": float(self.required),
            # how far this step runs ahead of the newest announced weights (<= η under the bound)
            "versions_ahead": float(self.step - 1 - self.newest_at_start),
            "weight_wait_s": self.wait_s,
            "weight_loads_in_step": float(self.loads_in_step),
            "weight_wait_s_total": counters.wait_s,
            "weight_loads_total": float(counters.loads),
            "sync_timeouts_total": float(counters.timeouts),
            "sync_request_timeouts_total": float(counters.request_timeouts),
        }


class ExplorerSync:
    def __init__(
        self,
        settings: SynchronizerConfig,
        style: SyncStyle,
        follower: WeightFollower,
        *,
        explorer_id: str,
        control_topic: str,
        weights_topic: str,
        status: StatusAnnouncer | None = None,
        loads_weights: bool = True,
    ) -> None:
        self.settings = settings
        self.loads_weights = loads_weights  # False: versions are the engine's server's
        self.style = style
        self.follower = follower
        self.explorer_id = explorer_id
        self.control_topic = control_topic
        self.weights_topic = weights_topic
        self.status = status  # where wait lines are announced, beside the log
        self.counters = SyncCounters()
        self.current: StepSync | None = None

    def newest_announced(self) -> int:
        latest = self.follower.latest
        return 0 if latest is None else latest.version

    def before_step(self, step: int, engine: RolloutEngine, writer: EventWriter) -> StepSync:
        """Hold explorer step `step` until its required version is loaded; load the newest."""
        started = time.monotonic()
        self.follower.poll()
        need = self.style.required_version(step)
        wished = self.style.should_request(step)
        must_ask = self.style.publishes_on_request and need > self.newest_announced()
        if wished or must_ask:
            writer.send(
                self.control_topic,
                SyncRequest(self.explorer_id, engine.model_version, step),
                key=self.explorer_id,
            )
            writer.flush()
        if not self.loads_weights:
            pass  # nothing to hold for or load: the server answers with its own version
        elif need > engine.model_version:
            self._hold_for(step, need, engine, started)
        elif wished:
            self._wait_for_answer(step, engine)
        self._load_newest(engine)
        sync = StepSync(step, need, self.newest_announced(), time.monotonic() - started)
        self.counters.wait_s += sync.wait_s
        self.current = sync
        return sync

    def between_rollouts(self, engine: RolloutEngine, task_ids: list[str]) -> None:
        """Before a chunk of a step's rollouts: under fully_async load what was announced since;
        either way record the version these tasks are sampled with (for an engine that loads
        weights: a remote engine's is known only after, see `after_rollouts`)."""
        sync = self.current
        if sync is None:
            return
        engine.oldest_answering_version()  # what answered earlier calls is not these tasks'
        if not self.loads_weights:
            return  # the version is known once the server has answered (after_rollouts)
        if self.style.loads_between_rollouts:
            self.follower.poll()
            if self._load_newest(engine):
                sync.loads_in_step += 1
        for task_id in task_ids:
            sync.task_versions[task_id] = engine.model_version

    def after_rollouts(self, engine: RolloutEngine, task_ids: list[str]) -> None:
        """After a chunk of a step's rollouts: where the engine's server said which versions
        answered, these tasks record the oldest of them."""
        sync = self.current
        answered = engine.oldest_answering_version()
        if sync is None or answered is None:
            return
        for task_id in task_ids:
            sync.task_versions[task_id] = answered

    def _load_newest(self, engine: RolloutEngine) -> bool:
        if not self.loads_weights:
            return False
        loaded = self.follower.load_newest(engine)
        if loaded:
            self.counters.loads += 1
        return loaded

    def _hold_for(self, step: int, need: int, engine: RolloutEngine, started: float) -> None:
        """Wait until `engine` holds a version >= `need`; per sync_timeout, count and warn or
        stop."""
        timeout = self.settings.sync_timeout
        notice = WaitNotice(self.status, step)
        deadline = time.monotonic() + timeout
        while True:
            # a refused version never satisfies the requirement: wait for one after it
            refused = [v for v in self.follower.refused if v >= need]
            target = max([need, *(v + 1 for v in refused)])
            # in slices, so a long wait says what it waits on
            slice_s = max(0.0, min(deadline - time.monotonic(), FIRST_WAIT_LINE_S))
            if self.follower.wait_for(target, slice_s) >= target:
                self._load_newest(engine)
                if engine.model_version >= need:
                    return
                continue
            notice.still(self._version_wait(step, target, engine))
            if time.monotonic() < deadline:
                continue
            deadline = time.monotonic() + timeout
            self.counters.timeouts += 1
            waited = time.monotonic() - started
            where = (
                f"explorer {self.explorer_id} step {step} needs weight version {need} "
                f"(sync_style {self.settings.sync_style}, max_head_offpolicyness "
                f"{self.settings.max_head_offpolicyness}); the newest on {self.weights_topic} is "
                f"{self.newest_announced()} and it holds {engine.model_version}, after "
                f"{waited:.0f}s"
            )
            if self.settings.on_sync_timeout == "stop":
                raise SyncTimeoutError(
                    f"{where}: stopping (synchronizer.on_sync_timeout: stop, sync_timeout "
                    f"{timeout:.0f}s)"
                )
            log.warning(
                "%s: still waiting (synchronizer.on_sync_timeout: wait; timeout %d)",
                where,
                self.counters.timeouts,
            )

    def _version_wait(self, step: int, version: int, engine: RolloutEngine) -> str:
        """What a held explorer waits on, for its wait line."""
        return (
            f"weight version {version} on {self.weights_topic} (written by the trainer) before "
            f"explorer {self.explorer_id} step {step}; the newest announced is "
            f"{self.newest_announced()} and it holds {engine.model_version}"
        )

    def _wait_for_answer(self, step: int, engine: RolloutEngine) -> None:
        timeout = self.settings.sync_timeout
        notice = WaitNotice(self.status, step)
        deadline = time.monotonic() + timeout
        while True:
            slice_s = max(0.0, min(deadline - time.monotonic(), FIRST_WAIT_LINE_S))
            newest = self.follower.wait_for(engine.model_version + 1, slice_s)
            answered = newest > engine.model_version
            if answered or time.monotonic() >= deadline:
                break
            notice.still(
                "an answer to its sync request: "
                + self._version_wait(step, engine.model_version + 1, engine)
            )
        if not answered:
            self.counters.request_timeouts += 1
            log.info(
                "step %d: no newer weights within %.0fs of the request, going on with version %d",
                step,
                timeout,
                engine.model_version,
            )
