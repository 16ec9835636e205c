"""Reads a local Hugging Face dataset directory with pyarrow alone (no `datasets` needed).

Understood layouts, tried in order under `<dir>/<subset_name>` when a subset is named:
`save_to_disk` output (`dataset_dict.json` + `<split>/state.json`, or a single `state.json`) whose
shards are Arrow IPC files, then the files of a dataset repo as the Hub holds them (GSM8K's
`main/train-00000-of-00001.parquet`, `data/train-*.parquet`, `test.jsonl`...): for each of
Parquet, JSON Lines and JSON, in that order, the first of the patterns `data/<split>-*`,
`data/<split>/*`, `<split>-*`, `<split>/*`, `<split>`, `data/<split>` (plus the extension) that
matches names the split's shards. When a split or subset is not there, the error lists the
subsets and splits that are.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rft.datasets.arrow_reader import read_arrow_ipc, read_parquet
from rft.datasets.json_reader import read_json
from rft.datasets.jsonl_reader import read_jsonl
from rft.datasets.rows import BadRow, TasksetRow
from rft.errors import TasksetError

log = logging.getLogger(__name__)

ShardReader = Callable[[Path, int], Iterator[TasksetRow | BadRow]]

#: Split-file formats in the order they are preferred when a split exists in several.
SHARD_READERS: dict[str, ShardReader] = {
    ".parquet": read_parquet,
    ".jsonl": read_jsonl,
    ".json": read_json,
}

SPLIT_PATTERNS = (
    "data/{split}-*{ext}",
    "data/{split}/*{ext}",
    "{split}-*{ext}",
    "{split}/*{ext}",
    "{split}{ext}",
    "data/{split}{ext}",
)

# `train-00000-of-00003` (the Hub's shard names) or `train-2`: the split is the part before
_SHARD_SUFFIX = re.compile(r"-\d{5}-of-\d{5}.*$|-\d+$")


def read_hf_dataset_dir(
    root: Path, split: str = "train", subset_name: str | None = None
) -> Iterator[TasksetRow | BadRow]:
    """Rows of `split` (of `subset_name`, if given) of the dataset saved under `root`.

    The shards are located at once, so a missing split or subset fails at the call.
    """
    shards, reader = locate_shards(root, split, subset_name)
    return _shard_rows(shards, reader)


def _shard_rows(shards: list[Path], reader: ShardReader) -> Iterator[TasksetRow | BadRow]:
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
    for ext, reader in SHARD_READERS.items():
        for pattern in SPLIT_PATTERNS:
            found = sorted(
                p for p in base.glob(pattern.format(split=split, ext=ext)) if p.is_file()
            )
            if found:
                _warn_unread(base, split, found)
                return found, reader
    raise TasksetError(
        f"{base}: split {split!r} not found: no save_to_disk layout (state.json) and no "
        f"{', '.join(SHARD_READERS)} files like data/{split}-*.parquet, {split}-*.jsonl or "
        f"{split}.json. {describe_contents(base)}"
    )


def describe_contents(base: Path) -> str:
    """What a dataset directory holds, in words: its splits and its subsets with theirs."""
    splits = sorted(_splits_in(base))
    subsets = {d.name: sorted(_splits_in(d)) for d in _subdirs(base) if _is_subset(d)}
    parts = []
    if splits:
        parts.append(f"Splits found: {', '.join(map(repr, splits))}.")
    if subsets:
        listed = "; ".join(f"{name}: {', '.join(s) or 'none'}" for name, s in subsets.items())
        parts.append(
            f"Subsets found (set subset_name): {', '.join(map(repr, subsets))} "
            f"(their splits: {listed})."
        )
    if not parts:
        parts.append(f"It holds no dataset files ({', '.join(SHARD_READERS)}, or save_to_disk).")
    return " ".join(parts)


def _subset_dir(root: Path, subset_name: str | None) -> Path:
    if not root.is_dir():
        raise TasksetError(f"{root}: taskset directory does not exist")
    if not subset_name:
        return root
    candidate = root / subset_name
    if candidate.is_dir():
        return candidate
    raise TasksetError(f"{root}: subset_name {subset_name!r} not found. {describe_contents(root)}")


def _subdirs(path: Path) -> list[Path]:
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))


def _data_files(path: Path) -> list[Path]:
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if p.is_file() and p.suffix in SHARD_READERS)


def _split_name(stem: str) -> str | None:
    """The split a file named `stem` holds, or None for a bare shard name (`0000`, `data-0`)."""
    name = _SHARD_SUFFIX.sub("", stem)
    if not name or name.isdigit() or name == "data":
        return None
    return name


def _splits_in(base: Path) -> set[str]:
    """Split names a directory holds: saved splits, split-named files and split folders."""
    if (base / "dataset_dict.json").is_file():
        saved = _read_json(base / "dataset_dict.json").get("splits", [])
        return {str(s) for s in saved} if isinstance(saved, list) else set()
    found: set[str] = set()
    for folder in (base, base / "data"):
        for file in _data_files(folder):
            name = _split_name(file.stem)
            if name:
                found.add(name)
        for sub in _subdirs(folder):
            if sub.name != "data" and not _is_subset(sub) and _data_files(sub):
                found.add(sub.name)
    return found


def _is_subset(path: Path) -> bool:
    """A folder that is a dataset of its own (GSM8K's `main/`), not a folder of one split's shards."""
    if (path / "dataset_dict.json").is_file():
        return True
    if (path / "state.json").is_file():
        return False  # one split of a save_to_disk DatasetDict
    if any(_split_name(f.stem) for f in _data_files(path) + _data_files(path / "data")):
        return True
    return any(_data_files(sub) for sub in _subdirs(path))


def _warn_unread(base: Path, split: str, chosen: list[Path]) -> None:
    """Files of the same split in another format or place are not read: say so."""
    others = [
        p
        for ext in SHARD_READERS
        for pattern in SPLIT_PATTERNS
        for p in base.glob(pattern.format(split=split, ext=ext))
        if p.is_file() and p not in chosen
    ]
    if others:
        log.warning(
            "%s: split %r is read from %s; %d other file(s) that look like the same split are "
            "not read: %s",
            base,
            split,
            [str(p.relative_to(base)) for p in chosen[:3]],
            len(set(others)),
            sorted({str(p.relative_to(base)) for p in others})[:5],
        )


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
