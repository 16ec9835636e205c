"""Sync styles: the rules that tie explorer steps to trainer weight versions.

A weight version is named by the train step that produced it (version 0 is the base model), so the
explorer can say exactly which version a step needs. Both sides ask the same object: the explorer
before each step (`required_version`, `should_request`) and between rollouts
(`loads_between_rollouts`), the trainer after each step (`should_publish`). Styles carry
Trinity-RFT's names; `explorer_driven` is an alias.

Bounded staleness (AReaL's η, `synchronizer.max_head_offpolicyness`) applies on top of every
style: explorer step s needs at least version s - 1 - η, i.e. an explorer never starts a rollout
more than η versions ahead of the newest version it holds. One explorer step is one trainer batch
(train_batch_size = batch_size × repeat_times), so a batch an explorer starts at step s is trained
at train step s at the earliest, on weights at most η versions newer than the ones that sampled it.
At most η + 1 of an explorer's batches are ever ahead of the newest announced weights (η committed,
one rolling out): that is the bound on batches in flight per explorer. The bound counts the
explorer's own steps: several explorers in one group each keep it, so together they can run
further ahead; the trainer's staleness policy is the hard limit on what trains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft.errors import ConfigError
from rft.registry import Registry


@dataclass(frozen=True)
class SyncStyle:
    """Base rules: the trainer publishes every `interval` steps; the explorer never blocks except
    for the η bound (`max_head_offpolicyness`, None: unbounded)."""

    interval: int = 1
    offset: int = 0
    max_head_offpolicyness: int | None = None

    def __post_init__(self) -> None:
        eta = self.max_head_offpolicyness
        if eta is None:
            return
        if eta < 0:
            raise ConfigError(f"synchronizer.max_head_offpolicyness: must be >= 0, got {eta}")
        if not self.publishes_on_request and eta < self.interval - 1:
            # step s needs version >= s-1-eta; the first one published at or after that is
            # ceil((s-1-eta)/interval)*interval, which the trainer reaches only with batches up
            # to then: the explorer would wait for weights that need its own next batches
            raise ConfigError(
                f"synchronizer.max_head_offpolicyness: {eta} is less than sync_interval - 1 = "
                f"{self.interval - 1}; versions come every {self.interval} train steps, so an "
                "explorer held that close would wait for a version that needs its own next "
                "batches (a deadlock)"
            )

    def required_version(self, step: int) -> int:
        """Lowest weight version the explorer must hold before running explorer step `step`
        (1-based): the style's own requirement, raised to step-1-η when η is set."""
        need = self.style_version(step)
        if self.max_head_offpolicyness is not None:
            need = max(need, step - 1 - self.max_head_offpolicyness)
        return need

    def style_version(self, step: int) -> int:
        """The style's own requirement, before the η bound."""
        return 0

    @property
    def staleness_bound(self) -> int | None:
        """The most versions a batch's sampling weights can lag the weights it is trained at
        (train step s holds version s - 1), when an explorer runs as far ahead as it may: η, or
        the style's own lead where it is smaller; None when nothing bounds it."""
        return self.max_head_offpolicyness

    def should_request(self, step: int) -> bool:
        """Whether the explorer sends a SyncRequest on the control topic before step `step`."""
        return False

    def should_publish(self, train_step: int) -> bool:
        """Whether the trainer writes a checkpoint and announces it after train step `train_step`."""
        return train_step % self.interval == 0

    @property
    def publishes_on_request(self) -> bool:
        return False

    @property
    def loads_between_rollouts(self) -> bool:
        """Whether the explorer loads a newly announced version inside a step, between rollout
        chunks, not only between steps."""
        return False


# the rule every style answers to is given the config: its publishing schedule must admit the
# configured η bound (a deadlock otherwise)
SYNC_STYLES: Registry[type[SyncStyle]] = Registry(
    "synchronizer.sync_style", rule="rft.synchronizer.sync_style:schedule_issues"
)


@SYNC_STYLES.register("fixed")
@dataclass(frozen=True)
class FixedSync(SyncStyle):
    """Lock-step with a lead: explorer step s needs version  max(0, floor((s-1-offset)/interval)*interval).

    With interval=1, offset=0 every step is on-policy (step s waits for the weights trained on step
    s-1). `sync_offset` lets the explorer run that many steps ahead, overlapping rollout and training
    at the price of bounded staleness (at most offset + interval - 1 versions).
    """

    def style_version(self, step: int) -> int:
        ahead = step - 1 - self.offset
        if ahead <= 0:
            return 0
        return (ahead // self.interval) * self.interval

    @property
    def staleness_bound(self) -> int | None:
        own = self.offset + self.interval - 1
        eta = self.max_head_offpolicyness
        return own if eta is None else min(own, eta)


@SYNC_STYLES.register("dynamic_by_explorer")
@dataclass(frozen=True)
class ExplorerDrivenSync(SyncStyle):
    """The explorer asks for weights every `interval` of its steps; the trainer publishes on request.

    The trainer answers with a checkpoint of its newest step (if it is newer than the last one it
    published); the explorer waits up to `synchronizer.sync_timeout` for it, then goes on (a
    request is a wish, not a requirement: the trainer may have nothing newer). Under the η bound
    the explorer also asks whenever it needs a version it does not have.
    """

    def should_request(self, step: int) -> bool:
        return step > 1 and (step - 1) % self.interval == 0

    def should_publish(self, train_step: int) -> bool:
        return False

    @property
    def publishes_on_request(self) -> bool:
        return True


SYNC_STYLES.add("explorer_driven", ExplorerDrivenSync)


@SYNC_STYLES.register("trainer_driven")
@dataclass(frozen=True)
class TrainerDrivenSync(SyncStyle):
    """Trinity-RFT's trainer-driven style: the trainer decides, publishing every `interval` train
    steps; each explorer picks the newest announced version up at its next step boundary and
    never waits for one (beyond the η bound)."""


@SYNC_STYLES.register("fully_async")
@dataclass(frozen=True)
class FullyAsyncSync(SyncStyle):
    """The trainer publishes every `interval` steps; an explorer loads a new version as soon as it
    is announced, between rollout chunks inside a step as well as between steps, so each
    experience is sampled by the newest weights the explorer could have. Nothing waits except
    under the η bound; each Experience records the version that sampled it."""

    @property
    def loads_between_rollouts(self) -> bool:
        return True


def build_sync_style(
    name: str, interval: int, offset: int = 0, max_head_offpolicyness: int | None = None
) -> SyncStyle:
    return SYNC_STYLES.get(name)(
        interval=interval, offset=offset, max_head_offpolicyness=max_head_offpolicyness
    )


def schedule_issues(name: str, spec: object, cfg: Any) -> list[tuple[str, str]]:
    """SYNC_STYLES' rule, as (config key, problem): the style built from the config's
    synchronizer settings, whose constructor checks the η bound against its schedule."""
    sync = cfg.synchronizer
    key = "synchronizer.max_head_offpolicyness"
    try:
        build_sync_style(name, sync.sync_interval, sync.sync_offset, sync.max_head_offpolicyness)
    except ConfigError as exc:
        return [(key, str(exc).removeprefix(f"{key}: "))]
    return []
