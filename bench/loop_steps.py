"""A run's steps side by side, from its `jsonl` metrics sink: the trainer's step time and the CPU
seconds its thread and its process spent meanwhile, beside the explorer's rollout time and
tokens/s for the same step number, and the interval since the trainer's previous step (from the
metrics' timestamps: what a step costs the loop, waits included). Medians at the foot (the first
step left out: warm-up), then the trainer's first step to its last.

Run: python -m bench.loop_steps <job_dir>/monitor/metrics.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path

TRAINER_KEYS = ("step_time_s", "step_thread_cpu_s", "step_process_cpu_s", "gpu_peak_gib")
EXPLORER_KEYS = ("rollout_time_s", "rollout_tokens_per_s")


def read(path: Path) -> dict[str, dict[int, dict[str, float]]]:
    """component -> step -> the step's values (the last line wins for a step written twice)."""
    steps: dict[str, dict[int, dict[str, float]]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"{path}:{number}: not a JSON line ({exc})") from exc
        steps.setdefault(row["component"], {}).setdefault(row["step"], {}).update(row["values"])
    return steps


def trainer_stamps(path: Path) -> dict[int, float]:
    """step -> seconds at which the trainer first reported it (its earliest record of that step)."""
    stamps: dict[int, float] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["component"] == "trainer":
            at = row["timestamp"] / 1000.0
            stamps[row["step"]] = min(at, stamps.get(row["step"], at))
    return stamps


def with_intervals(
    steps: dict[str, dict[int, dict[str, float]]], stamps: dict[int, float]
) -> dict[str, dict[int, dict[str, float]]]:
    """The trainer's steps with `interval_s`: seconds since its previous step's first record."""
    numbers = sorted(stamps)
    trainer = {step: dict(values) for step, values in steps.get("trainer", {}).items()}
    for before, step in itertools.pairwise(numbers):
        trainer.setdefault(step, {})["interval_s"] = stamps[step] - stamps[before]
    return {**steps, "trainer": trainer}


def span(stamps: dict[int, float]) -> str:
    """The trainer's first step to its last, in seconds, as a sentence."""
    if len(stamps) < 2:
        return "trainer: fewer than two steps reported"
    first, last = min(stamps), max(stamps)
    return f"trainer step {first} -> step {last}: {stamps[last] - stamps[first]:.1f} s"


def table(steps: dict[str, dict[int, dict[str, float]]]) -> list[str]:
    trainer, explorer = steps.get("trainer", {}), steps.get("explorer", {})
    keys = TRAINER_KEYS + (
        ("interval_s",) if any("interval_s" in v for v in trainer.values()) else ()
    )
    columns = [("trainer", k) for k in keys] + [("explorer", k) for k in EXPLORER_KEYS]
    lines = ["| step | " + " | ".join(f"{c} {k}" for c, k in columns) + " |"]
    lines.append("|---" * (len(columns) + 1) + "|")
    numbers = sorted(set(trainer) | set(explorer))
    for step in numbers:
        cells = []
        for component, key in columns:
            value = (trainer if component == "trainer" else explorer).get(step, {}).get(key)
            cells.append("" if value is None else f"{value:.4g}")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    medians = []
    for component, key in columns:
        source = trainer if component == "trainer" else explorer
        values = [source[s][key] for s in numbers[1:] if key in source.get(s, {})]
        medians.append(f"{statistics.median(values):.4g}" if values else "")
    lines.append("| median (from the 2nd) | " + " | ".join(medians) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", type=Path, help="a jsonl sink's metrics.jsonl")
    args = parser.parse_args()
    stamps = trainer_stamps(args.metrics)
    print("\n".join(table(with_intervals(read(args.metrics), stamps))))
    print(span(stamps))


if __name__ == "__main__":
    main()
