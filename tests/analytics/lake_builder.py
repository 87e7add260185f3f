"""Real lakes for the analytics tests: events -> the sink's Arrow columns -> Parquet files in
the DESIGN §6 layout (`processors.lake` does the conversion and the atomic write)."""

from __future__ import annotations

import zlib
from array import array
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from contracts.lake_layout import file_key, hour_of
from ground.store import Store
from processors.lake.columns import LakeColumns
from processors.lake.writer import write_parquet
from schemas.catalog import load_schema
from schemas.events import Event
from streams.topics import TOPIC_VALUE_SCHEMAS

TOPIC_OF = {schema: topic for topic, schema in TOPIC_VALUE_SCHEMAS.items()}


def _key(event: Event) -> str:
    for name in ("session_id", "group_id", "model_name"):
        value = getattr(event, name, None)
        if value:
            return str(value)
    return event.event_id


def write_lake(
    lake: Path | Store, events: Iterable[Event], *, partitions: int = 4, rows_per_file: int = 500
) -> int:
    """Write `events` into `lake` as the sink would: per topic and partition (crc32 of the key),
    offsets in event-time order, one file per hour and at most `rows_per_file` rows.
    Returns the number of files written."""
    store = Store.at(lake)
    by_partition: dict[tuple[str, int], list[Event]] = defaultdict(list)
    for event in events:
        topic = TOPIC_OF[event.SCHEMA_NAME]
        by_partition[topic, zlib.crc32(_key(event).encode()) % partitions].append(event)
    columns = {t: LakeColumns(load_schema(s)) for t, s in TOPIC_VALUE_SCHEMAS.items()}
    files = 0
    for (topic, partition), group in sorted(by_partition.items()):
        group.sort(key=lambda e: e.event_time)
        chunks: list[list[Event]] = []
        for event in group:
            last = chunks[-1] if chunks else None
            if (
                last
                and len(last) < rows_per_file
                and hour_of(last[0].event_time) == hour_of(event.event_time)
            ):
                last.append(event)
            else:
                chunks.append([event])
        offset = 0
        for chunk in chunks:
            cols = columns[topic]
            rows = [cols.row(e.to_record()) for e in chunk]
            offsets = array("q", range(offset, offset + len(chunk)))
            table = cols.table(rows, topic, partition, offsets)
            key = file_key(
                topic,
                partition,
                offset,
                offset + len(chunk) - 1,
                hour_of(chunk[0].event_time),
            )
            write_parquet(store, key, table)
            offset += len(chunk)
            files += 1
    return files
