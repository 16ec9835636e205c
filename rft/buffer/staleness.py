"""StalenessPolicy: decides whether an experience is still fresh enough to train on.

Staleness is `trainer_version - experience.model_version`: how many weight versions behind the
policy that generated the experience is. Experiences past `max_staleness` are dropped and counted,
never silently: the trainer reports the count as a metric and logs each drop.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StalenessPolicy:
    """`max_staleness=None` accepts everything (fully off-policy replay)."""

    max_staleness: int | None = None

    def staleness(self, trainer_version: int, model_version: int) -> int:
        return max(0, trainer_version - model_version)

    def accepts(self, trainer_version: int, model_version: int) -> bool:
        if self.max_staleness is None:
            return True
        return self.staleness(trainer_version, model_version) <= self.max_staleness
