"""bench/loop_steps.py's own logic: a run's metrics.jsonl read into steps per component (a step
written twice keeps its last values), the table's rows and medians from the second step, and a
line that is not JSON named by file and line, and the trainer's intervals between steps from the
metrics' timestamps."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.loop_steps import read, span, table, trainer_stamps, with_intervals


def write(
    path: Path, rows: list[tuple[str, int, dict[str, float]]], at: list[int] | None = None
) -> None:
    stamps = at or [0] * len(rows)
    lines = [
        json.dumps({"component": c, "run": "r", "step": s, "timestamp": t, "values": v, "tags": {}})
        for (c, s, v), t in zip(rows, stamps, strict=True)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_steps_side_by_side_with_medians_from_the_second(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    write(
        path,
        [
            ("explorer", 1, {"rollout_time_s": 9.0, "rollout_tokens_per_s": 100.0}),
            ("trainer", 1, {"step_time_s": 20.0, "step_thread_cpu_s": 5.0}),
            ("explorer", 2, {"rollout_time_s": 4.0, "rollout_tokens_per_s": 300.0}),
            ("trainer", 2, {"step_time_s": 6.0, "step_thread_cpu_s": 2.0}),
            ("trainer", 2, {"step_time_s": 5.0}),  # written again: the last value wins
            ("trainer", 3, {"step_time_s": 7.0, "step_thread_cpu_s": 3.0}),
        ],
    )
    steps = read(path)
    assert steps["trainer"][2] == {"step_time_s": 5.0, "step_thread_cpu_s": 2.0}
    lines = table(steps)
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {line.split("|")[1].strip(): line for line in lines[2:]}
    assert set(rows) == {"1", "2", "3", "median (from the 2nd)"}

    def cell(row: str, column: str) -> str:
        return rows[row].strip().strip("|").split("|")[header.index(column)].strip()

    assert cell("1", "trainer step_time_s") == "20"
    assert cell("3", "explorer rollout_time_s") == ""  # the explorer wrote no step 3
    # steps 2 and 3 only: the first step's warm-up is left out
    assert cell("median (from the 2nd)", "trainer step_time_s") == "6"
    assert cell("median (from the 2nd)", "trainer step_thread_cpu_s") == "2.5"
    assert cell("median (from the 2nd)", "explorer rollout_tokens_per_s") == "300"
    assert cell("median (from the 2nd)", "trainer gpu_peak_gib") == ""


def test_a_line_that_is_not_json_is_named_by_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    write(path, [("trainer", 1, {"step_time_s": 1.0})])
    with path.open("a", encoding="utf-8") as out:
        out.write('{"component": "trainer", "st\n')
    with pytest.raises(SystemExit, match=re.escape(f"{path}:2: not a JSON line")):
        read(path)


def test_the_interval_since_the_trainers_previous_step_from_its_first_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "metrics.jsonl"
    write(
        path,
        [
            ("trainer", 1, {"step_time_s": 9.0}),
            ("explorer", 2, {"rollout_time_s": 1.0}),  # the explorer's clock plays no part
            ("trainer", 2, {"step_time_s": 3.0}),
            ("trainer", 2, {"gpu_peak_gib": 26.0}),  # a later record of step 2: not its start
            ("trainer", 3, {"step_time_s": 3.0}),
            ("trainer", 4, {"step_time_s": 3.0}),
        ],
        at=[1_000, 2_000, 4_500, 9_000, 16_500, 20_000],
    )
    stamps = trainer_stamps(path)
    assert stamps == {1: 1.0, 2: 4.5, 3: 16.5, 4: 20.0}
    steps = with_intervals(read(path), stamps)
    assert [steps["trainer"][s].get("interval_s") for s in (1, 2, 3, 4)] == [None, 3.5, 12.0, 3.5]
    assert steps["trainer"][2]["gpu_peak_gib"] == 26.0
    lines = table(steps)
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    medians = [c.strip() for c in lines[-1].strip().strip("|").split("|")]
    assert medians[header.index("trainer interval_s")] == "3.5"
    assert span(stamps) == "trainer step 1 -> step 4: 19.0 s"
    assert span({1: 1.0}) == "trainer: fewer than two steps reported"


def test_no_interval_column_without_timestamps_to_tell_it(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    write(path, [("trainer", 1, {"step_time_s": 1.0})])
    assert "interval_s" not in table(read(path))[0]
