"""Rows of a dataset file or a local Hugging Face dataset directory, read by its suffix."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from rft.config.schema import TasksetConfig
from rft.datasets.arrow_reader import read_arrow_ipc, read_parquet
from rft.datasets.hf_dataset_reader import read_hf_dataset_dir
from rft.datasets.json_reader import read_json
from rft.datasets.jsonl_reader import read_jsonl
from rft.datasets.rows import BadRow, TasksetRow
from rft.errors import TasksetError

FileReader = Callable[[Path], Iterator[TasksetRow | BadRow]]
FILE_READERS: dict[str, FileReader] = {
    ".jsonl": read_jsonl,
    ".json": read_json,
    ".parquet": read_parquet,
    ".arrow": read_arrow_ipc,
}


def file_rows(taskset: TasksetConfig) -> Iterable[TasksetRow | BadRow]:
    """The rows of `taskset.path`: a JSONL/JSON/Parquet/Arrow file, or a local Hugging Face
    dataset directory (its `split` and `subset_name`)."""
    path = Path(taskset.path).expanduser()
    if path.is_dir():
        try:
            return read_hf_dataset_dir(path, taskset.split, taskset.subset_name)
        except TasksetError as exc:
            raise TasksetError(f"taskset {taskset.name!r}: {exc}") from exc
    if not path.exists():
        raise TasksetError(f"{path}: taskset {taskset.name!r} path does not exist")
    reader = FILE_READERS.get(path.suffix.lower())
    if reader is None:
        raise TasksetError(
            f"{path}: unsupported taskset file type {path.suffix!r} "
            f"(supported: {', '.join(FILE_READERS)}, or a Hugging Face dataset directory)"
        )
    return reader(path)
