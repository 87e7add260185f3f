"""Where a partition resumes: the files in the lake, not the consumer group, are the truth."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from contracts.lake_layout import scan_topic

TopicPartition = tuple[str, int]


def prepare_partitions(
    lake: Path, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """For each (topic, partition) a sink takes over: delete its orphan temporary files (left by
    a writer that died before renaming them) and return the offset to resume at, the largest
    `last` of its files + 1, or None when it has no file (start at the log's beginning).

    Only the given partitions' temporary files are touched: another member of the group may
    be writing the others'.
    """
    wanted = list(partitions)
    resume: dict[TopicPartition, int | None] = {}
    for topic in {t for t, _ in wanted}:
        scan = scan_topic(lake, topic)
        offsets = scan.resume_offsets()
        for t, partition in wanted:
            if t != topic:
                continue
            for temp in scan.temps.get(partition, []):
                temp.unlink(missing_ok=True)
            resume[(t, partition)] = offsets.get(partition)
    return resume
