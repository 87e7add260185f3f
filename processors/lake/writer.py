"""Atomic, durable Parquet files: a reader sees a whole file or none, also after a crash."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from contracts.lake_layout import temp_path
from ground.durable import fsync_dir

COMPRESSION = "zstd"
# One row group per file at the default rotation (50k rows); bigger files get 128k-row groups,
# which keeps a row group's column chunks around a few MiB, where readers scan efficiently.
ROW_GROUP_ROWS = 128 * 1024


def write_parquet_atomically(table: pa.Table, final_path: Path) -> int:
    """Write `table` to `final_path` so that the file appears complete or not at all.

    Steps: create missing directories (each made durable in its parent), write a temporary
    file beside the final one (`layout.temp_path`), fsync it, rename it over `final_path`, fsync
    the directory. A crash at any point leaves either no file (maybe an orphan temp file, which
    the sink removes when it takes the partition) or the complete file. An existing file of the
    same name is replaced: names encode offset ranges, so it holds the same records.

    Returns the file's size in bytes. OSError (disk full, permissions) propagates after the
    temporary file is removed.
    """
    directory = final_path.parent
    make_dirs_durably(directory)
    temp = temp_path(final_path)
    try:
        with open(temp, "wb") as out:
            pq.write_table(table, out, compression=COMPRESSION, row_group_size=ROW_GROUP_ROWS)
            out.flush()
            os.fsync(out.fileno())
            size = out.tell()
        os.replace(temp, final_path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(directory)
    return size


def make_dirs_durably(directory: Path) -> None:
    """`mkdir -p` that also fsyncs the parent of each directory it creates, so a rename into
    it cannot outlive the directory entry after a power loss."""
    missing: list[Path] = []
    probe = directory
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)  # exist_ok: another writer may create it at the same time
        fsync_dir(path.parent)
