"""What a sampled batch says about the data it trains on: the per-step sampler metrics.

- staleness (learner rows: batch version - model_version): min / mean / max and a histogram,
  `staleness/<bucket>` = rows in the bucket (buckets 0, 1, 2, 3-4, 5-8, 9+);
- replay: `replayed_fraction` (learner rows trained before) and a use-count histogram,
  `use_count/<bucket>` (1, 2, 3, 4+);
- who produced it: `experiences/<explorer id>` and `experiences_by_group/<explorer group>`,
  learner rows per explorer process and per explorer group;
- mix: `mix_ratio` (demonstration rows / all rows), `expert_rows`;
- what the sampler let go: `dropped_stale`, `filtered_groups`, `filtered_experiences`,
  `evicted`, `rejected`, `retired` since the previous batch, and each as `<name>_total`.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from rft.buffer.sampler import SampledBatch, SamplerCounters

STALENESS_BUCKETS: tuple[tuple[int, int | None], ...] = (
    (0, 0),
    (1, 1),
    (2, 2),
    (3, 4),
    (5, 8),
    (9, None),
)
USE_COUNT_BUCKETS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 2), (3, 3), (4, None))

_LET_GO = (
    "dropped_stale",
    "filtered_groups",
    "filtered_experiences",
    "evicted",
    "rejected",
    "retired",
)


def bucket_name(low: int, high: int | None) -> str:
    if high is None:
        return f"{low}+"
    return str(low) if low == high else f"{low}-{high}"


def histogram(values: np.ndarray, buckets: tuple[tuple[int, int | None], ...]) -> dict[str, int]:
    """Counts of integer `values` per bucket (every value >= the first bucket's low end)."""
    out = {}
    for low, high in buckets:
        inside = values >= low if high is None else (values >= low) & (values <= high)
        out[bucket_name(low, high)] = int(inside.sum())
    return out


def batch_metrics(batch: SampledBatch, previous: SamplerCounters) -> dict[str, float]:
    """The metrics of `batch`; `previous` are the counters as the previous batch left them."""
    learner = batch.learner_rows
    values: dict[str, float] = {}
    if learner:
        staleness = np.array([batch.version - r.exp.model_version for r in learner], dtype=np.int64)
        values |= {
            "staleness_min": float(staleness.min()),
            "staleness_mean": float(staleness.mean()),
            "staleness_max": float(staleness.max()),
        }
        values |= {
            f"staleness/{k}": float(v) for k, v in histogram(staleness, STALENESS_BUCKETS).items()
        }
        uses = np.array([r.use_count for r in learner], dtype=np.int64)
        values["replayed_fraction"] = float((uses > 1).mean())
        values |= {
            f"use_count/{k}": float(v) for k, v in histogram(uses, USE_COUNT_BUCKETS).items()
        }
        # rows by the explorer process and the explorer group that produced them: who feeds this
        # trainer, and how much (a group with experiences_to: own never appears here)
        for explorer_id, count in Counter(r.exp.explorer_id for r in learner).items():
            values[f"experiences/{explorer_id}"] = float(count)
        for group, count in Counter(r.exp.explorer_group for r in learner).items():
            values[f"experiences_by_group/{group}"] = float(count)
    expert = len(batch.rows) - len(learner)
    values["expert_rows"] = float(expert)
    values["mix_ratio"] = expert / len(batch.rows) if batch.rows else 0.0
    now = batch.counters
    for name in _LET_GO:
        total = getattr(now, name)
        values[name] = float(total - getattr(previous, name))
        values[f"{name}_total"] = float(total)
    return values
