"""Atomic Parquet writes: complete or absent, never a temp file left, zstd inside."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from processors.lake import writer
from processors.lake.writer import write_parquet_atomically


def table(n: int) -> pa.Table:
    return pa.table(
        {"x": pa.array(range(n), pa.int64()), "s": pa.array([f"v{i}" for i in range(n)])}
    )


def test_the_file_appears_complete_in_new_directories_with_zstd(tmp_path: Path) -> None:
    final = tmp_path / "t" / "dt=2026-01-01" / "hour=00" / "t+0+0+99.parquet"
    size = write_parquet_atomically(table(100), final)
    assert size == final.stat().st_size
    assert pq.read_table(final).equals(table(100))
    assert pq.ParquetFile(final).metadata.row_group(0).column(0).compression == "ZSTD"
    assert sorted(p.name for p in final.parent.iterdir()) == [final.name]


def test_a_rewrite_of_the_same_range_replaces_the_file(tmp_path: Path) -> None:
    final = tmp_path / "t+0+0+9.parquet"
    write_parquet_atomically(table(3), final)
    write_parquet_atomically(table(10), final)
    assert pq.read_table(final).num_rows == 10
    assert [p.name for p in tmp_path.iterdir()] == [final.name]


def test_a_failed_write_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(_table: pa.Table, out: object, **_: object) -> None:
        out.write(b"PAR1 half a file")  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", broken)
    final = tmp_path / "t+0+0+9.parquet"
    with pytest.raises(OSError, match="disk full"):
        write_parquet_atomically(table(3), final)
    assert list(tmp_path.iterdir()) == []


def test_large_tables_are_split_into_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "ROW_GROUP_ROWS", 40)
    final = tmp_path / "t+0+0+99.parquet"
    write_parquet_atomically(table(100), final)
    assert pq.ParquetFile(final).metadata.num_row_groups == 3
