"""Parquet files that appear whole or not at all, also after a crash (`ground.store`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from ground.durable import write_file_durably
from ground.store import Store

COMPRESSION = "zstd"
# One row group per file at the default rotation (50k rows); bigger files get 128k-row groups,
# which keeps a row group's column chunks around a few MiB, where readers scan efficiently.
ROW_GROUP_ROWS = 128 * 1024


def write_parquet(store: Store, key: str, table: pa.Table) -> int:
    """Write `table` as the file `key` of `store`, visible complete or not at all
    (`Store.write_atomically`). An existing file of that key is replaced: lake names encode
    offset ranges, so it holds the same records. Returns the size in bytes; OSError (disk
    full, permissions, an unreachable store) propagates and leaves nothing new visible."""
    return store.write_atomically(key, _parquet(table))


def write_parquet_atomically(table: pa.Table, final_path: Path) -> int:
    """`write_parquet` for a path on local disk (compaction and erasure, which work on local
    lakes): a temporary file beside `final_path`, fsync, rename, fsync of the directory."""
    return write_file_durably(final_path, _parquet(table))


def _parquet(table: pa.Table) -> Callable[[BinaryIO], None]:
    def write(out: BinaryIO) -> None:
        pq.write_table(table, out, compression=COMPRESSION, row_group_size=ROW_GROUP_ROWS)

    return write
