"""ExperiencePipeline: the configured experience operators, applied in order to a sampled batch.

The trainer hands each batch the sampler forms to `apply` before the step. The operators see the
batch's learner experiences (demonstration rows pass through untouched, in place) and return the
ones to train; `apply` maps what they return back onto the batch's rows (each row keeps where it
was read and its use count) and says in the metrics, per operator, what it reported and how many
experiences it dropped: `pipeline/<name>/<metric>`, `pipeline/<name>/dropped`, and
`pipeline/dropped` for the whole pipeline. A dropped experience was still consumed: the sampler
has let it go like a trained one, so its offset settles; it is not in the version's trained log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rft.buffer.experience_operators import EXPERIENCE_OPERATORS, ExperienceOperator
from rft.buffer.sampler import BatchRow, SampledBatch
from rft.errors import RftError
from rft.events.models import Experience


class OperatorOutputError(RftError):
    """An operator returned an experience that is not one of its input's, or out of order."""


@dataclass(frozen=True)
class Stage:
    """One operator of the pipeline, with its args and the name its metrics go under."""

    name: str
    fn: ExperienceOperator
    args: Mapping[str, Any]
    label: str


class ExperiencePipeline:
    def __init__(self, stages: Sequence[Stage]) -> None:
        self.stages = list(stages)
        self.dropped_total = 0  # experiences dropped since this pipeline was built
        # the drop counts of batches the operators emptied, said with the next step's metrics
        self._carried: dict[str, float] = {}

    @classmethod
    def of(cls, operators: Sequence[tuple[str, Mapping[str, Any]]]) -> ExperiencePipeline:
        """The pipeline of (registered name, args) pairs, in order; an operator used twice gets
        its position in its metrics' name (`reward_std_filter#2`)."""
        seen: dict[str, int] = {}
        stages = []
        for name, args in operators:
            seen[name] = seen.get(name, 0) + 1
            label = name if seen[name] == 1 else f"{name}#{seen[name]}"
            stages.append(Stage(name, EXPERIENCE_OPERATORS.get(name), dict(args), label))
        return cls(stages)

    def run(self, batch: SampledBatch) -> tuple[SampledBatch | None, dict[str, float]]:
        """`apply`, for the trainer: (the batch to train, or None when nothing is left; the
        metrics for its step). The drop counts of an emptied batch are added to those of the
        next batch that trains, so every drop reaches a step's metrics."""
        kept, metrics = self.apply(batch)
        self.dropped_total += int(metrics["pipeline/dropped"])
        for key, value in self._carried.items():
            metrics[key] = metrics.get(key, 0.0) + value
        if kept.rows:
            self._carried = {}
            return kept, metrics
        self._carried = {k: v for k, v in metrics.items() if k.endswith("/dropped")}
        return None, {}

    def apply(self, batch: SampledBatch) -> tuple[SampledBatch, dict[str, float]]:
        """The batch with its learner rows through every operator in order, and the metrics."""
        learner = [(i, row) for i, row in enumerate(batch.rows) if not row.expert]
        metrics: dict[str, float] = {}
        before = len(learner)
        for stage in self.stages:
            kept, values = stage.fn([row.exp for _, row in learner], **stage.args)
            dropped = len(learner) - len(kept)
            learner = _matched(stage.name, learner, kept)
            metrics |= {f"pipeline/{stage.label}/{k}": float(v) for k, v in values.items()}
            metrics[f"pipeline/{stage.label}/dropped"] = float(dropped)
        metrics["pipeline/dropped"] = float(before - len(learner))
        changed = dict(learner)
        rows = [
            row if row.expert else changed[i]
            for i, row in enumerate(batch.rows)
            if row.expert or i in changed
        ]
        return SampledBatch(rows, batch.version, batch.counters), metrics


def _matched(
    name: str, rows: list[tuple[int, BatchRow]], kept: Sequence[Experience]
) -> list[tuple[int, BatchRow]]:
    """The rows `kept` came from, each carrying its (maybe changed) experience: `kept` must be a
    subsequence of the rows' experiences, matched by experience_id in order."""
    out = []
    j = 0
    for exp in kept:
        while j < len(rows) and rows[j][1].exp.experience_id != exp.experience_id:
            j += 1
        if j == len(rows):
            raise OperatorOutputError(
                f"experience operator {name!r} returned experience {exp.experience_id!r}, which "
                "is not one of its input's left in order: an operator may drop and change "
                "experiences, never add or reorder them"
            )
        index, row = rows[j]
        out.append((index, row if row.exp is exp else dataclasses.replace(row, exp=exp)))
        j += 1
    return out
