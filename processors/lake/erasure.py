"""Erasure and retention in the lake: remove one user's rows, drop hour folders past retention.

Erasure rewrites each lake file holding rows of the user under **the same name** (temporary
file, fsync, rename: `writer.write_parquet_atomically`), with the same Arrow schema; a file left
with no rows stays as a zero-row file. Names encode Kafka offset ranges, so the ranges still
tile each partition and the sink's resume offset (largest `last` + 1) is unchanged.

Which rows are the user's (`user_id` is the pseudonym, as stored):

* `telemetry.suggestions`: `user_id`; they give the user's suggestion and session ids;
* `rewards`: `user_id` (schema v2+), or a session or suggestion (`source_id`) of the user;
* `telemetry.outcomes`, `telemetry.edits`: a suggestion or session of the user;
* `telemetry.tests`: a session of the user;
* `features.updates`: an entity id with the user as one of its key values.

Dead-letter topics (`dlq.*`) are not in the lake (the sink does not write them); see
`processors.lake.dlq_erasure`. The erasure is recorded as an `ErasureRecorded` event on
`privacy.erasures` (:func:`erasure_event`), which the sink lands in `lake/privacy.erasures/`
and feature processors follow.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from contracts.lake_layout import scan_topic
from processors.lake.errors import ErasureError
from processors.lake.maintenance import holds_maintenance_lock
from processors.lake.writer import write_parquet_atomically
from schemas.events import ErasureRecorded
from streams.topics import (
    EDITS_TOPIC,
    FEATURE_UPDATES_TOPIC,
    OUTCOMES_TOPIC,
    REWARDS_TOPIC,
    SUGGESTIONS_TOPIC,
    TESTS_TOPIC,
)

ENTITY_ID_SEPARATOR = "@"  # feature_store.semantics: composite entity ids join keys with it
USER_TOPICS = (
    SUGGESTIONS_TOPIC, REWARDS_TOPIC, OUTCOMES_TOPIC, EDITS_TOPIC, TESTS_TOPIC,
    FEATURE_UPDATES_TOPIC,
)  # fmt: skip


@dataclass(frozen=True)
class UserKeys:
    """The ids that identify a user's rows in topics without `user_id`."""

    user_id: str
    suggestion_ids: frozenset[str]
    session_ids: frozenset[str]


@dataclass
class ErasureReport:
    """What an erasure changed: lake rows removed per topic, files rewritten, and dead letters
    removed per DLQ topic (filled in by the caller that purged them)."""

    erasure_id: str
    user_id: str
    rows_removed: dict[str, int] = field(default_factory=dict)
    files_rewritten: list[Path] = field(default_factory=list)
    dead_letters_removed: dict[str, int] = field(default_factory=dict)


def lake_files(lake: Path, topic: str) -> Iterator[Path]:
    """Every visible lake file of `topic` (temporary files excluded), in name order."""
    scan = scan_topic(lake, topic)
    for files in scan.files.values():
        yield from (f.path for f in files)


def user_keys(lake: Path, user_id: str) -> UserKeys:
    """The user's suggestion and session ids, from `telemetry.suggestions` in the lake."""
    suggestions: set[str] = set()
    sessions: set[str] = set()
    for path in lake_files(lake, SUGGESTIONS_TOPIC):
        table = pq.read_table(path, columns=["user_id", "suggestion_id", "session_id"])
        mine = table.filter(pc.equal(table["user_id"], user_id))
        suggestions.update(mine["suggestion_id"].to_pylist())
        sessions.update(mine["session_id"].to_pylist())
    return UserKeys(user_id, frozenset(suggestions), frozenset(sessions))


def user_rows(topic: str, table: pa.Table, keys: UserKeys) -> pa.ChunkedArray | pa.Array:
    """Boolean mask of `table`'s rows (a file of `topic`) that belong to the user; nulls never
    match. Columns a file lacks (older schema versions) match nothing."""
    names = set(table.column_names)
    masks: list[pa.ChunkedArray | pa.Array] = []

    def any_of(column: str, values: frozenset[str] | set[str]) -> None:
        if column in names and values:
            masks.append(pc.is_in(table[column], value_set=pa.array(sorted(values), pa.string())))

    any_of("user_id", {keys.user_id} if topic in (SUGGESTIONS_TOPIC, REWARDS_TOPIC) else set())
    if topic != SUGGESTIONS_TOPIC and topic != FEATURE_UPDATES_TOPIC:
        any_of("session_id", keys.session_ids)
        key = "source_id" if topic == REWARDS_TOPIC else "suggestion_id"
        any_of(key, keys.suggestion_ids)
    if topic == FEATURE_UPDATES_TOPIC and "entity_id" in names:
        masks.append(_entity_has_user(table["entity_id"], keys.user_id))
    mask: pa.ChunkedArray | pa.Array = pa.array([False] * table.num_rows, pa.bool_())
    for m in masks:
        mask = pc.or_(mask, pc.fill_null(m, False))
    return mask


def _entity_has_user(entity_ids: pa.ChunkedArray, user_id: str) -> pa.Array:
    sep = ENTITY_ID_SEPARATOR
    return pa.array(
        [e is not None and user_id in e.split(sep) for e in entity_ids.to_pylist()], pa.bool_()
    )


@holds_maintenance_lock  # never interleaved with a compaction (processors.lake.maintenance)
def erase_user(
    lake: Path, user_id: str, *, keys: UserKeys | None = None, erasure_id: str | None = None
) -> ErasureReport:
    """Remove every lake row of `user_id` (a pseudonym).

    Files keep their names, schemas and offset ranges (see the module docstring); files without
    the user's rows are not touched. `keys` defaults to :func:`user_keys` (read before the
    suggestions are rewritten: they hold the keys). Idempotent: a second run removes nothing.
    ErasureError for an empty id.
    """
    if not user_id:
        raise ErasureError("the user id is empty; pass the user's pseudonym (or --raw with the id)")
    report = ErasureReport(erasure_id or uuid.uuid4().hex, user_id)
    keys = keys or user_keys(lake, user_id)
    for topic in USER_TOPICS:
        removed = 0
        for path in lake_files(lake, topic):
            table = pq.read_table(path)
            mask = user_rows(topic, table, keys)
            count = pc.sum(mask).as_py() or 0
            if count:
                write_parquet_atomically(table.filter(pc.invert(mask)), path)
                report.files_rewritten.append(path)
                removed += count
        report.rows_removed[topic] = removed
    return report


def erasure_event(report: ErasureReport, *, producer: str) -> ErasureRecorded:
    """The event recording `report` on `privacy.erasures` (its time: now)."""
    return ErasureRecorded(
        producer=producer,
        erasure_id=report.erasure_id,
        user_id=report.user_id,
        rows_removed=sum(report.rows_removed.values()),
        files_rewritten=len(report.files_rewritten),
        rows_by_topic={**report.rows_removed, **report.dead_letters_removed},
    )


@dataclass
class RetentionReport:
    """Hour folders deleted, and those kept because they hold a partition's newest file."""

    deleted: list[Path] = field(default_factory=list)
    kept_for_resume: list[Path] = field(default_factory=list)


@holds_maintenance_lock
def retain(
    lake: Path, days: float, *, now: datetime | None = None,
    remove: Callable[[Path], None] = shutil.rmtree,
) -> RetentionReport:  # fmt: skip
    """Delete every `<lake>/<table>/dt=*/hour=*` folder whose hour ended more than `days` ago.

    A folder holding the newest file of a partition is kept: the sink resumes from the largest
    offset on disk, and without any file it would re-read the topic from its beginning.
    ErasureError for days <= 0.
    """
    if days <= 0:
        raise ErasureError(f"--days must be > 0, got {days}")
    cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
    report = RetentionReport()
    for table_dir in sorted(p for p in lake.iterdir() if p.is_dir()) if lake.is_dir() else []:
        anchors = _newest_file_dirs(lake, table_dir.name)
        for folder in sorted(table_dir.glob("dt=*/hour=*")):
            ends = _hour_start(folder) + timedelta(hours=1)
            if ends > cutoff:
                continue
            if folder in anchors:
                report.kept_for_resume.append(folder)
                continue
            remove(folder)
            report.deleted.append(folder)
        for day in table_dir.glob("dt=*"):
            if day.is_dir() and not any(day.iterdir()):
                os.rmdir(day)
    return report


def _newest_file_dirs(lake: Path, topic: str) -> set[Path]:
    scan = scan_topic(lake, topic)
    return {max(files).path.parent for files in scan.files.values() if files}


def _hour_start(folder: Path) -> datetime:
    try:
        day = folder.parent.name.removeprefix("dt=")
        hour = int(folder.name.removeprefix("hour="))
        return datetime.fromisoformat(day).replace(hour=hour, tzinfo=UTC)
    except ValueError as exc:
        raise ErasureError(
            f"{folder} is not a dt=YYYY-MM-DD/hour=HH folder; move it out of the lake"
        ) from exc
