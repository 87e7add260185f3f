"""Events as lake files, written as the sink writes them (one file per call), for learner tests."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from contracts.lake_layout import file_path, hour_of_ms
from processors.lake.columns import LakeColumns
from processors.lake.writer import write_parquet_atomically
from schemas.catalog import load_schema
from schemas.records import AvroRecord, encode_time


def write_lake_file(
    lake: Path, topic: str, events: Sequence[AvroRecord], at: datetime, first: int = 0
) -> Path:
    """``events`` as one lake file of ``topic``, partition 0, offsets ``first``.., in the hour
    of ``at``."""
    columns = LakeColumns(load_schema(type(events[0]).__name__))
    table = columns.table([columns.row(e.to_record()) for e in events], topic, 0,
                          array("q", range(first, first + len(events))))  # fmt: skip
    path = file_path(lake, topic, 0, first, first + len(events) - 1, hour_of_ms(encode_time(at)))
    write_parquet_atomically(table, path)
    return path
