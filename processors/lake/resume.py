"""Where a partition resumes: the files in the lake, not the consumer group, are the truth."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from contracts.lake_layout import LakeFile, scan_topic
from ground.durable import fsync_dir

TopicPartition = tuple[str, int]


def prepare_partitions(
    lake: Path, partitions: Iterable[TopicPartition]
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
                temp.unlink(missing_ok=True)
            delete_superseded(scan.superseded.get(partition, []))
            resume[(t, partition)] = offsets.get(partition)
    return resume


def delete_superseded(files: Iterable[LakeFile]) -> int:
    """Delete superseded files (`contracts.lake_layout`); returns how many were deleted.

    Each directory is fsynced before (so the file superseding them, which compaction renamed
    into the same directory, is durable before they go) and after the deletions.
    """
    by_dir: dict[Path, list[Path]] = {}
    for f in files:
        by_dir.setdefault(f.path.parent, []).append(f.path)
    deleted = 0
    for directory, paths in by_dir.items():
        fsync_dir(directory)
        for path in paths:
            try:
                path.unlink()
                deleted += 1
            except FileNotFoundError:
                pass  # another sink or compaction deleted it first
        fsync_dir(directory)
    return deleted
