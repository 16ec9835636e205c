"""Reads Arrow-backed tasksets with pyarrow: Parquet files and Arrow IPC (stream or file) shards.

Rows are tagged `path:row=N` (0-based within the file) and made strict-JSON; a row with a value
JSON cannot carry (bytes, NaN) becomes a BadRow naming the column.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rft.datasets.rows import BadRow, NotJsonError, TasksetRow, json_payload
from rft.errors import TasksetError

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ROWS = 1024


def read_parquet(path: Path, start_index: int = 0) -> Iterator[TasksetRow | BadRow]:
    """Rows of the Parquet file `path`; taskset indices start at `start_index`."""
    # imported here: runs that only generate tasks never load pyarrow
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        batches = parquet.iter_batches(batch_size=BATCH_ROWS)
        yield from _rows(path, batches, start_index)
    except (OSError, pa.ArrowException) as exc:
        raise TasksetError(f"{path}: not a readable Parquet file: {exc}") from exc


def read_arrow_ipc(path: Path, start_index: int = 0) -> Iterator[TasksetRow | BadRow]:
    """Rows of an Arrow IPC file (`datasets` writes the stream format; the file format works too)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    try:
        source = pa.memory_map(str(path), "r")
    except (OSError, pa.ArrowException) as exc:
        raise TasksetError(f"{path}: cannot open Arrow file: {exc}") from exc
    with source:
        try:
            reader: Iterable[pa.RecordBatch] = ipc.open_stream(source)
        except pa.ArrowInvalid:
            source.seek(0)
            try:
                file_reader = ipc.open_file(source)
            except pa.ArrowException as exc:
                raise TasksetError(f"{path}: not an Arrow IPC stream or file: {exc}") from exc
            reader = (file_reader.get_batch(i) for i in range(file_reader.num_record_batches))
        try:
            yield from _rows(path, reader, start_index)
        except pa.ArrowException as exc:
            raise TasksetError(f"{path}: corrupt Arrow data: {exc}") from exc


def _rows(
    path: Path, batches: Iterable[pa.RecordBatch], start_index: int
) -> Iterator[TasksetRow | BadRow]:
    row_number = 0
    for batch in batches:
        for raw in batch.to_pylist():
            origin = f"{path}:row={row_number}"
            index = start_index + row_number
            try:
                yield TasksetRow(index, json_payload(raw), origin)
            except NotJsonError as exc:
                yield BadRow(index, origin, str(exc))
            row_number += 1
