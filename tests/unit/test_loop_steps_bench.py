"""bench/loop_steps.py's own logic: a run's metrics.jsonl read into steps per component (a step
written twice keeps its last values), the table's rows and medians from the second step, and a
line that is not JSON named by file and line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.loop_steps import read, table


def write(path: Path, rows: list[tuple[str, int, dict[str, float]]]) -> None:
    lines = [
        json.dumps({"component": c, "run": "r", "step": s, "timestamp": 0, "values": v, "tags": {}})
        for c, s, v in rows
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
