"""Where a partition resumes: the files in the lake, not the consumer group, are the truth."""

from __future__ import annotations

from collections.abc import Iterable

from contracts.lake_layout import LakeFile, scan_topic
from ground.store import Store

TopicPartition = tuple[str, int]


def prepare_partitions(
    lake: Store, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """For each (topic, partition) a sink takes over: delete its orphan temporary files (left by
    a writer that died before renaming them) and its superseded files (left by a compaction
    that died before deleting its inputs), and return the offset to resume at, the largest
    `last` of its files + 1, or None when it has no file (start at the log's beginning).

    Only the given partitions' files are touched: another member of the group may be writing
    the others'.
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
                lake.delete(temp)
            delete_superseded(lake, scan.superseded.get(partition, []))
            resume[(t, partition)] = offsets.get(partition)
    return resume


def delete_superseded(lake: Store, files: Iterable[LakeFile]) -> int:
    """Delete superseded files (`contracts.lake_layout`); returns how many were deleted.

    On local disk each directory is fsynced before (so the file superseding them, which
    compaction renamed into the same directory, is durable before they go) and after.
    """
    by_dir: dict[str, list[str]] = {}
    for f in files:
        key = lake.key(f.path)
        by_dir.setdefault(key.rsplit("/", 1)[0], []).append(key)
    deleted = 0
    for directory, keys in by_dir.items():
        lake.sync_dir(directory)
        deleted += sum(lake.delete(key) for key in keys)  # False: another sink deleted it first
        lake.sync_dir(directory)
    return deleted
