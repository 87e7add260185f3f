"""Lake compaction: merge a closed hour's small files, per topic and partition, into large ones.

Which files (:func:`select_runs`): in one `hour=` directory of one partition, a *run* is a
maximal sequence of files whose ranges follow each other (`last + 1 == next.first`) and whose
sizes are below the target and add up to at most the target; runs of two or more files are
merged. The merged file is named by the run's `[first of the first, last of the last]`, so the
ranges still tile each partition; a partition's newest file is never merged, so the sink's
resume offset (largest `last` + 1) does not change even for a reader that lists a directory
while compaction renames and deletes in it. Files of another hour in between break a run: they
are never merged across.

Which hours (:func:`closed`): those that ended more than `min_age_s` ago. A late event can
still make the sink write a new file into a compacted hour; that is fine, since a compaction
merges only the files it listed, and the new file's range is above all of theirs.

How (:func:`merge_run`): write the merged file atomically under its new name (on disk: temporary
file, fsync, rename, fsync the directory; in an object store: one upload), then delete the inputs
(and fsync the directory). Between the merged file's appearance and the deletions the inputs are
*superseded* (`contracts.lake_layout`): every reader through `scan_topic` (sink resume, erasure,
the learner) skips them, and whoever comes next deletes them (the maintenance lock, the sink on
assignment). Rows keep their order; the merged schema is the union of the inputs' (a column an
older file lacks is null, as in the views).

Compaction holds the lake's maintenance lock (`processors.lake.maintenance`: an flock on disk, a
lease in an object store), so an erasure or a retention run never interleaves with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from contracts.lake_layout import (
    SECONDS_PER_HOUR,
    LakeFile,
    file_name,
    parse_hour_dir,
    scan_topic,
    topic_dirs,
)
from ground.store import Store
from processors.lake.erasure import RetentionReport, retain
from processors.lake.errors import LakeError
from processors.lake.maintenance import maintenance_lock, still_held
from processors.lake.resume import delete_superseded
from processors.lake.writer import write_parquet

MIB = 1024 * 1024
DEFAULT_TARGET_BYTES = 128 * MIB
# An hour is closed this long after it ended: far above the sink's file age (30 s by default),
# so the hour's regular files are all written; a late event's file is still safe (see above).
DEFAULT_MIN_AGE_S = 3600.0
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompactionRun:
    """Files of one partition in one hour directory, contiguous, to become one file."""

    files: tuple[LakeFile, ...]
    bytes: int  # their sizes added up

    @property
    def target(self) -> str:
        """The merged file's path (in the lake's filesystem): the run's directory, named by its
        whole range."""
        first, last = self.files[0], self.files[-1]
        name = file_name(first.topic, first.partition, first.first, last.last)
        return f"{first.path.rsplit('/', 1)[0]}/{name}"


@dataclass
class TopicCompaction:
    """One topic's figures: visible files and their bytes before and after, runs merged."""

    files_before: int = 0
    bytes_before: int = 0
    files_after: int = 0
    bytes_after: int = 0
    runs: int = 0


@dataclass
class CompactionReport:
    """What a compaction did (or, with dry_run, would do)."""

    topics: dict[str, TopicCompaction] = field(default_factory=dict)
    retention: RetentionReport | None = None
    dry_run: bool = False


def closed(directory: Path, now: datetime, min_age_s: float) -> bool:
    """True when `directory` is a `dt=/hour=` directory whose hour ended `min_age_s` ago."""
    hour = parse_hour_dir(directory)
    return hour is not None and (hour + 1) * SECONDS_PER_HOUR + min_age_s <= now.timestamp()


def select_runs(
    files: Iterable[LakeFile], sizes: Mapping[str, int], target_bytes: int
) -> list[CompactionRun]:
    """The runs to merge among one partition's `files` (see the module docstring): per hour
    directory, in offset order, contiguous files each below `target_bytes` whose sizes add up
    to at most `target_bytes`; only runs of two or more files."""
    by_dir: dict[Path, list[LakeFile]] = {}
    for f in files:
        by_dir.setdefault(Path(f.path).parent, []).append(f)
    runs: list[CompactionRun] = []
    for directory in sorted(by_dir):
        current: list[LakeFile] = []
        total = 0
        for f in sorted(by_dir[directory]):
            size = sizes[f.path]
            follows = bool(current) and current[-1].last + 1 == f.first
            if follows and size < target_bytes and total + size <= target_bytes:
                current.append(f)
                total += size
                continue
            if len(current) > 1:
                runs.append(CompactionRun(tuple(current), total))
            current, total = ([f], size) if size < target_bytes else ([], 0)
        if len(current) > 1:
            runs.append(CompactionRun(tuple(current), total))
    return runs


def merged_table(paths: Sequence[str], store: Store) -> pa.Table:
    """The rows of `paths` (in `store`'s filesystem) in order, under the union of their schemas
    (missing columns null, types promoted as `union_by_name` reads them); zero-row files add
    their columns only."""
    tables = [pq.read_table(p, filesystem=store.fs) for p in paths]
    return pa.concat_tables(tables, promote_options="permissive")


def merge_run(run: CompactionRun, store: Store) -> int:
    """Merge `run` into `run.target` in the lake `store` (module docstring: write, then delete
    the inputs); returns the merged file's size. LakeError when the merged file would lose
    rows; MaintenanceLockError when the lake's lease was lost (`still_held`)."""
    table = merged_table([f.path for f in run.files], store)
    expected = sum(pq.read_metadata(f.path, filesystem=store.fs).num_rows for f in run.files)
    name = run.target.rsplit("/", 1)[-1]
    if table.num_rows != expected:
        raise LakeError(f"merging into {name} gave {table.num_rows} rows, not {expected}")
    still_held(store)
    size = write_parquet(store, store.key(run.target), table)
    # The inputs, superseded by `run.target` since it appeared (all in its directory).
    delete_superseded(store, run.files)
    return size


def plan(
    lake: Store, topic: str, *, now: datetime, min_age_s: float, target_bytes: int
) -> tuple[list[CompactionRun], TopicCompaction]:
    """The runs to merge in `topic` and its figures before (after: as if they were merged)."""
    listed = {lake.path(f.key): f.size for f in lake.files(topic)}
    scan = scan_topic(lake, topic)
    stats = TopicCompaction()
    runs: list[CompactionRun] = []
    for files in scan.files.values():
        # 0: gone since the listing (a rewrite in flight): sizes only steer the selection
        sizes = {f.path: listed.get(f.path, 0) for f in files}
        stats.files_before += len(files)
        stats.bytes_before += sum(sizes.values())
        # The newest file stays as it is: a reader listing a directory while compaction renames
        # and deletes may miss both the merged file and its inputs (readdir is not atomic across
        # calls); the sink's resume point (its `last` + 1) must never depend on that.
        eligible = [f for f in files[:-1] if closed(Path(f.path).parent, now, min_age_s)]
        runs += select_runs(eligible, sizes, target_bytes)
    stats.runs = len(runs)
    stats.files_after = stats.files_before - sum(len(r.files) - 1 for r in runs)
    stats.bytes_after = stats.bytes_before
    return runs, stats


def compact_lake(
    lake: Path | Store,
    topics: Sequence[str] | None = None,
    *,
    min_age_s: float = DEFAULT_MIN_AGE_S,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    retention_days: float | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> CompactionReport:
    """Compact `topics` of `lake` (default: every topic directory) under the maintenance lock.

    First, with `retention_days`, hour folders past retention are dropped (`erasure.retain`,
    for every table of the lake). Then each topic's closed hours are compacted.
    `progress(topic, runs done, runs planned)` is called as runs finish. `dry_run` changes
    nothing (retention included) and reports what would be done. Raises LakeError subclasses:
    MaintenanceLockError when another maintenance holds the lock too long, ErasureError for a
    bad retention; OSError (disk full) propagates, leaving at most superseded files, which the
    next run deletes.
    """
    if target_bytes <= 0 or min_age_s < 0:
        raise LakeError(
            f"target size must be > 0 and min age >= 0; got {target_bytes}, {min_age_s}"
        )
    now = now or datetime.now(UTC)
    report = CompactionReport(dry_run=dry_run)
    store = Store.at(lake)
    with maintenance_lock(store):
        if retention_days is not None:
            report.retention = retain(store, retention_days, now=now, dry_run=dry_run)
        for topic in topics if topics is not None else topic_dirs(store):
            runs, stats = plan(
                store, topic, now=now, min_age_s=min_age_s, target_bytes=target_bytes
            )
            report.topics[topic] = stats
            for done, run in enumerate(runs, 1):
                if not dry_run:
                    stats.bytes_after += merge_run(run, store) - run.bytes
                if progress is not None:
                    progress(topic, done, len(runs))
    return report
