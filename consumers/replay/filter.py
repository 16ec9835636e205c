"""ExperienceFilter: which logged experiences a replay keeps, by field.

Bounds are inclusive; an unset bound or an empty set keeps everything. `explorers` matches an
experience's `explorer_id` or its `explorer_group` (the consumer group), so one name selects a
single process or every process of a group.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rft.errors import ConfigError
from rft.events.models import Experience


@dataclass(frozen=True)
class ExperienceFilter:
    min_version: int | None = None
    max_version: int | None = None
    explorers: frozenset[str] = field(default_factory=frozenset)
    task_ids: frozenset[str] = field(default_factory=frozenset)
    min_reward: float | None = None
    max_reward: float | None = None

    def __post_init__(self) -> None:
        for low, high, what in (
            (self.min_version, self.max_version, "version"),
            (self.min_reward, self.max_reward, "reward"),
        ):
            if low is not None and high is not None and low > high:
                raise ConfigError(f"--min-{what} {low} is above --max-{what} {high}")

    @property
    def keeps_all(self) -> bool:
        return self == ExperienceFilter()

    def accepts(self, exp: Experience) -> bool:
        if self.min_version is not None and exp.model_version < self.min_version:
            return False
        if self.max_version is not None and exp.model_version > self.max_version:
            return False
        if self.min_reward is not None and not exp.reward >= self.min_reward:
            return False  # a NaN reward is inside no range
        if self.max_reward is not None and not exp.reward <= self.max_reward:
            return False
        if self.task_ids and exp.task_id not in self.task_ids:
            return False
        return not self.explorers or bool({exp.explorer_id, exp.explorer_group} & self.explorers)

    def describe(self) -> str:
        """The filter in words, for progress lines; "" when it keeps everything."""
        parts = []
        if self.min_version is not None or self.max_version is not None:
            parts.append(f"version {_range(self.min_version, self.max_version)}")
        if self.min_reward is not None or self.max_reward is not None:
            parts.append(f"reward {_range(self.min_reward, self.max_reward)}")
        if self.explorers:
            parts.append(f"explorer in {sorted(self.explorers)}")
        if self.task_ids:
            parts.append(f"{len(self.task_ids)} task id(s)")
        return ", ".join(parts)


def _range(low: float | None, high: float | None) -> str:
    return f"[{'-inf' if low is None else low}, {'inf' if high is None else high}]"
