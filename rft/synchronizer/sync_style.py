"""Sync styles: the rules that tie explorer steps to trainer weight versions.

A weight version is named by the train step that produced it (version 0 is the base model), so the
explorer can say exactly which version a step needs. Both sides ask the same object: the explorer
before each step (`required_version`, `should_request`), the trainer after each step
(`should_publish`). Styles carry Trinity-RFT's names; `explorer_driven` is an alias.
"""

from __future__ import annotations

from dataclasses import dataclass

from rft.registry import Registry


@dataclass(frozen=True)
class SyncStyle:
    """Base rules: the trainer publishes every `interval` steps; the explorer never blocks."""

    interval: int = 1
    offset: int = 0

    def required_version(self, step: int) -> int:
        """Lowest weight version the explorer must hold before running explorer step `step` (1-based)."""
        return 0

    def should_request(self, step: int) -> bool:
        """Whether the explorer sends a SyncRequest on the control topic before step `step`."""
        return False

    def should_publish(self, train_step: int) -> bool:
        """Whether the trainer writes a checkpoint and announces it after train step `train_step`."""
        return train_step % self.interval == 0

    @property
    def publishes_on_request(self) -> bool:
        return False


SYNC_STYLES: Registry[type[SyncStyle]] = Registry("synchronizer.sync_style")


@SYNC_STYLES.register("fixed")
@dataclass(frozen=True)
class FixedSync(SyncStyle):
    """Lock-step with a lead: explorer step s needs version  max(0, floor((s-1-offset)/interval)*interval).

    With interval=1, offset=0 every step is on-policy (step s waits for the weights trained on step
    s-1). `sync_offset` lets the explorer run that many steps ahead, overlapping rollout and training
    at the price of bounded staleness (at most offset + interval - 1 versions).
    """

    def required_version(self, step: int) -> int:
        ahead = step - 1 - self.offset
        if ahead <= 0:
            return 0
        return (ahead // self.interval) * self.interval


@SYNC_STYLES.register("dynamic_by_explorer")
@dataclass(frozen=True)
class ExplorerDrivenSync(SyncStyle):
    """The explorer asks for weights every `interval` of its steps; the trainer publishes on request.

    The trainer answers with a checkpoint of its newest step (if it is newer than the last one it
    published); the explorer waits up to `synchronizer.sync_timeout` for it, then goes on.
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
    """The trainer publishes every `interval` steps; explorers pick up the newest version between steps."""


@SYNC_STYLES.register("fully_async")
@dataclass(frozen=True)
class FullyAsyncSync(SyncStyle):
    """Like trainer_driven; named for Trinity-RFT's split explorer/trainer setup with no waiting at all.

    Staleness is then bounded only by the trainer's `max_staleness` policy.
    """


def build_sync_style(name: str, interval: int, offset: int = 0) -> SyncStyle:
    return SYNC_STYLES.get(name)(interval=interval, offset=offset)
