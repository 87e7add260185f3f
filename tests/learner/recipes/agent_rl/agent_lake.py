"""Events as lake files, written as the sink writes them (one file per call), a test topic's lake
files under its platform topic's name, and token windows read back, for learner tests."""

from __future__ import annotations

import shutil
from array import array
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import numpy as np

from contracts.lake_layout import file_name, file_path, hour_of_ms, scan_topic
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


def window_rows(directory: Path) -> dict[str, np.ndarray]:
    """An MDS token window's rows: each column over every sample, padding rows dropped."""
    from streaming import LocalDataset

    dataset = LocalDataset(str(directory))
    rows = [dataset[i] for i in range(len(dataset))]
    return {
        k: np.concatenate([r[k][: r["n_rows"]] for r in rows]) for k in rows[0] if k != "n_rows"
    }


def adopt_topic(lake: Path, topic: str, platform: str) -> None:
    """Move the lake files a sink wrote for test topic ``topic`` to ``platform``'s directory
    and file names, where the learner and the analysts' views read the platform's topic."""
    for files in scan_topic(lake, topic).files.values():
        for f in files:
            hour = Path(f.path).parent.relative_to(lake / topic)
            target = lake / platform / hour / file_name(platform, f.partition, f.first, f.last)
            target.parent.mkdir(parents=True, exist_ok=True)
            Path(f.path).rename(target)
    shutil.rmtree(lake / topic)
