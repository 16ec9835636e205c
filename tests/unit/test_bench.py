"""Bench without a broker: which versions it evaluates, the `--versions` argument, the printed
table, and `explorer.bench_on_latest_checkpoint` as a real config field."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.catalog import load_config
from rft.cli.bench_cmd import parse_versions
from rft.consumers.ops.bench import BenchReport, select_versions
from rft.errors import ConfigError


def test_default_is_base_and_every_version() -> None:
    assert select_versions([2, 5, 9], latest_only=False) == [0, 2, 5, 9]
    assert select_versions([], latest_only=False) == [0]


def test_latest_only_and_explicit_lists() -> None:
    assert select_versions([2, 5, 9], latest_only=True) == [9]
    assert select_versions([], latest_only=True) == [0]  # no checkpoint yet: the base model
    assert select_versions([2, 5, 9], latest_only=True, requested=[9, 0, 2, 2]) == [0, 2, 9]
    with pytest.raises(ConfigError, match=r"versions \[3, 4\] are not in the checkpoint store"):
        select_versions([2, 5], latest_only=False, requested=[2, 3, 4])


@given(
    available=st.lists(st.integers(1, 50), unique=True).map(sorted),
    latest_only=st.booleans(),
    data=st.data(),
)
def test_selection_is_ascending_and_within_the_store(
    available: list[int], latest_only: bool, data: st.DataObject
) -> None:
    requested = data.draw(st.none() | st.lists(st.sampled_from([0, *available])))
    chosen = select_versions(available, latest_only=latest_only, requested=requested)
    assert chosen == sorted(set(chosen))
    assert set(chosen) <= {0, *available}
    if requested is not None:
        assert set(chosen) == set(requested)
    elif latest_only:
        assert chosen == [max([0, *available])]
    else:
        assert chosen == [0, *available]


def test_parse_versions() -> None:
    assert parse_versions("3,5,7") == [3, 5, 7]
    assert parse_versions("0, 4") == [0, 4]
    for bad in ("3,x", "", "-1", ","):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_versions(bad)


def test_table_has_a_row_per_version_and_a_column_per_taskset() -> None:
    report = BenchReport("p.n", tasks={"sub": 3, "add": 4})
    report.accuracy = {0: {"add": 0.25, "sub": 0.0}, 4: {"add": 0.5, "sub": 1 / 3}}
    report.refused = {2: "checkpoint v2: file 'model.safetensors' is corrupt"}
    lines = report.table().splitlines()
    assert lines[0] == "== bench p.n: eval accuracy by weight version"
    assert lines[1].split() == ["version", "mean", "add", "(4)", "sub", "(3)"]
    assert lines[3].split() == ["0", "(base)", "0.125", "0.250", "0.000"]
    assert lines[4].split() == ["2", "refused"]
    assert lines[5].split() == ["4", "0.417", "0.500", "0.333"]
    assert lines[6] == "version 2 refused: checkpoint v2: file 'model.safetensors' is corrupt"


def test_bench_on_latest_checkpoint_is_a_config_field(tmp_path: Path) -> None:
    config = tmp_path / "bench.yaml"
    config.write_text(
        "project: p\nname: n\nmode: bench\nmodel: {model_path: tiny}\n"
        "buffer:\n  batch_size: 2\n  explorer_input:\n    eval_tasksets:\n"
        "      - {name: e, storage_type: generator, path: arithmetic,"
        " default_workflow_type: math_workflow}\n"
        "explorer: {bench_on_latest_checkpoint: true}\n"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(config)
    assert cfg.explorer.bench_on_latest_checkpoint is True
    assert not [w for w in caught if "bench_on_latest_checkpoint" in str(w.message)]
    config.write_text(
        config.read_text().replace("bench_on_latest_checkpoint: true", "eval_interval: 5")
    )
    assert load_config(config).explorer.bench_on_latest_checkpoint is False
