"""Reads a local Hugging Face dataset directory with pyarrow alone (no `datasets` needed).

Understood layouts, tried in order under `<dir>/<subset_name>` when a subset is named:
`save_to_disk` output (`dataset_dict.json` + `<split>/state.json`, or a single `state.json`) whose
shards are Arrow IPC files, then Hub-style Parquet shards (`data/<split>-*.parquet`,
`data/<split>/*.parquet`, `<split>-*.parquet`, `<split>/*.parquet`, `<split>.parquet`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from producers.arrow_reader import read_arrow_ipc, read_parquet
from producers.taskset_rows import BadRow, TasksetRow
from rft.errors import TasksetError

PARQUET_PATTERNS = (
    "data/{split}-*.parquet",
    "data/{split}/*.parquet",
    "{split}-*.parquet",
    "{split}/*.parquet",
    "{split}.parquet",
    "data/{split}.parquet",
)

ShardReader = Callable[[Path, int], Iterator[TasksetRow | BadRow]]


def read_hf_dataset_dir(
    root: Path, split: str = "train", subset_name: str | None = None
) -> Iterator[TasksetRow | BadRow]:
    """Rows of `split` (of `subset_name`, if given) of the dataset saved under `root`."""
    shards, reader = locate_shards(root, split, subset_name)
    index = 0
    for shard in shards:
        for row in reader(shard, index):
            yield row
            index += 1


def locate_shards(
    root: Path, split: str, subset_name: str | None
) -> tuple[list[Path], ShardReader]:
    """The shard files holding the split, in order, and the function that reads them."""
    base = _subset_dir(root, subset_name)
    if (base / "dataset_dict.json").is_file():
        splits = _read_json(base / "dataset_dict.json").get("splits", [])
        if split not in splits:
            raise TasksetError(
                f"{base / 'dataset_dict.json'}: split {split!r} not found (splits: {splits})"
            )
        return _state_shards(base / split, split), read_arrow_ipc
    if (base / "state.json").is_file():
        return _state_shards(base, split), read_arrow_ipc
    for pattern in PARQUET_PATTERNS:
        found = sorted(base.glob(pattern.format(split=split)))
        if found:
            return found, read_parquet
    present = sorted(str(p.relative_to(base)) for p in base.rglob("*.parquet"))[:10]
    raise TasksetError(
        f"{base}: no shards for split {split!r}: expected a save_to_disk layout (state.json) or "
        f"Parquet files like data/{split}-*.parquet (Parquet files present: {present or 'none'})"
    )


def _subset_dir(root: Path, subset_name: str | None) -> Path:
    if not root.is_dir():
        raise TasksetError(f"{root}: taskset directory does not exist")
    if not subset_name:
        return root
    candidate = root / subset_name
    if candidate.is_dir():
        return candidate
    subsets = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    raise TasksetError(f"{root}: subset_name {subset_name!r} not found (subdirectories: {subsets})")


def _state_shards(split_dir: Path, split: str) -> list[Path]:
    state_path = split_dir / "state.json"
    if not state_path.is_file():
        raise TasksetError(f"{state_path}: missing (expected a save_to_disk split directory)")
    state = _read_json(state_path)
    saved_split = state.get("_split")
    if saved_split not in (None, split):
        raise TasksetError(f"{state_path}: holds split {saved_split!r}, not {split!r}")
    try:
        files = [split_dir / entry["filename"] for entry in state["_data_files"]]
    except (KeyError, TypeError) as exc:
        raise TasksetError(f"{state_path}: no valid _data_files list") from exc
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise TasksetError(f"{state_path}: lists shards that do not exist: {missing}")
    return files


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TasksetError(f"{path}: unreadable JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise TasksetError(f"{path}: expected a JSON object")
    return value
