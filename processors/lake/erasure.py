"""Erasure and retention in the lake: remove one user's rows, drop hour folders past retention.

Erasure rewrites each lake file holding rows of the user under **the same name**, visible whole
or not at all (`writer.write_parquet`: temporary file, fsync, rename on disk; one upload in an
object store), with the same Arrow schema; a file left with no rows stays as a zero-row file.
Names encode Kafka offset ranges, so the ranges still tile each partition and the sink's resume
offset (largest `last` + 1) is unchanged.

Which rows are the user's (`user_id` is the pseudonym, as stored; :func:`user_rows`): a row whose
`user_id` is the user's, or, where `user_id` is null or absent, a row that names one of the
user's ids: a `session_id`, `suggestion_id` or `completion_id`, or a `source_id` (the suggestion
or completion a Reward scores). The ids (:func:`user_keys`) are those of the user's rows in
`telemetry.suggestions`, `agent.completions` and `agent.feedback`. A row that names another
user never counts. `features.updates` rows are the user's when an entity id has the user as one
of its key values. The tables searched (:data:`USER_TOPICS`) are every platform topic whose
schema has one of these columns, `privacy.erasures` (the audit trail) excepted.

Dead-letter topics (`dlq.*`) are not in the lake (the sink does not write them); see
`processors.lake.dlq_erasure`. The erasure is recorded as an `ErasureRecorded` event on
`privacy.erasures` (:func:`erasure_event`), which the sink lands in `lake/privacy.erasures/`
and feature processors follow.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from contracts.lake_layout import scan_topic, topic_dirs
from ground.store import Store
from processors.lake.errors import ErasureError
from processors.lake.maintenance import holds_maintenance_lock, still_held
from processors.lake.writer import write_parquet
from schemas.catalog import load_schema
from schemas.events import ErasureRecorded
from streams.topics import (
    COMPLETIONS_TOPIC,
    ERASURES_TOPIC,
    FEEDBACK_TOPIC,
    SUGGESTIONS_TOPIC,
    TOPIC_VALUE_SCHEMAS,
)

ENTITY_ID_SEPARATOR = "@"  # feature_store.semantics: composite entity ids join keys with it
USER_COLUMN = "user_id"
ENTITY_COLUMN = "entity_id"  # features.updates: the user is one of the entity's key values
# Columns that can name one of the user's ids (`UserKeys.ids_of`).
ID_COLUMNS = ("session_id", "suggestion_id", "completion_id", "source_id")
KEY_TOPICS = (SUGGESTIONS_TOPIC, COMPLETIONS_TOPIC, FEEDBACK_TOPIC)  # where the user's ids are
# Kept on purpose: the erasure's own record, which replaying consumers need (module docstring).
NOT_ERASED = frozenset({ERASURES_TOPIC})


def user_topics() -> tuple[str, ...]:
    """Every platform topic whose schema has a column that can identify a user's row
    (`user_id`, an id column, `entity_id`), `NOT_ERASED` excepted, `KEY_TOPICS` last: a new
    table with such a column is erased without a change here."""
    columns = {USER_COLUMN, ENTITY_COLUMN, *ID_COLUMNS}
    found = [
        topic
        for topic, schema in TOPIC_VALUE_SCHEMAS.items()
        if topic not in NOT_ERASED and columns & {f["name"] for f in load_schema(schema)["fields"]}
    ]
    # The topics holding the user's ids last: an erasure cut short still finds them when run again.
    return tuple(sorted(found, key=lambda t: t in KEY_TOPICS))


USER_TOPICS = user_topics()


@dataclass(frozen=True)
class UserKeys:
    """The ids that identify a user's rows where `user_id` is null or absent."""

    user_id: str
    suggestion_ids: frozenset[str]
    session_ids: frozenset[str]
    completion_ids: frozenset[str] = frozenset()

    def ids_of(self, column: str) -> frozenset[str]:
        """The user's ids a column of `ID_COLUMNS` may hold (a Reward's `source_id` names a
        suggestion or a completion)."""
        return {
            "session_id": self.session_ids,
            "suggestion_id": self.suggestion_ids,
            "completion_id": self.completion_ids,
            "source_id": self.suggestion_ids | self.completion_ids,
        }.get(column, frozenset())


@dataclass
class ErasureReport:
    """What an erasure changed: lake rows removed per topic, files rewritten, and, filled in by
    the caller that removed them, dead letters per DLQ topic and the training windows dropped
    (`<dataset>/<window>`)."""

    erasure_id: str
    user_id: str
    rows_removed: dict[str, int] = field(default_factory=dict)
    files_rewritten: list[str] = field(default_factory=list)  # paths in the lake's filesystem
    dead_letters_removed: dict[str, int] = field(default_factory=dict)
    windows_dropped: list[str] = field(default_factory=list)


def lake_files(lake: Path | Store, topic: str) -> Iterator[str]:
    """Every visible lake file of `topic` (temporary files excluded), in name order: paths in
    the lake's filesystem (`Store.fs`)."""
    scan = scan_topic(lake, topic)
    for files in scan.files.values():
        yield from (f.path for f in files)


def user_keys(lake: Path | Store, user_id: str) -> UserKeys:
    """The user's suggestion, session and completion ids: those of the rows with the user's
    `user_id` in `telemetry.suggestions`, `agent.completions` and `agent.feedback`."""
    store = Store.at(lake)
    ids: dict[str, set[str]] = {c: set() for c in ("suggestion_id", "session_id", "completion_id")}
    for topic in KEY_TOPICS:
        for path in lake_files(store, topic):
            present = set(pq.read_schema(path, filesystem=store.fs).names)
            wanted = [c for c in ids if c in present]
            table = pq.read_table(path, columns=[USER_COLUMN, *wanted], filesystem=store.fs)
            mine = table.filter(pc.fill_null(pc.equal(table[USER_COLUMN], user_id), False))
            for column in wanted:
                ids[column].update(v for v in mine[column].to_pylist() if v is not None)
    return UserKeys(
        user_id,
        frozenset(ids["suggestion_id"]),
        frozenset(ids["session_id"]),
        frozenset(ids["completion_id"]),
    )


def user_rows(table: pa.Table, keys: UserKeys) -> pa.ChunkedArray | pa.Array:
    """Boolean mask of `table`'s rows (a lake file of any topic) that are the user's (module
    docstring); nulls never match. Columns a file lacks (older schema versions) match nothing."""
    names = set(table.column_names)
    false: pa.ChunkedArray | pa.Array = pa.array([False] * table.num_rows, pa.bool_())

    def member(column: str, values: frozenset[str]) -> pa.ChunkedArray | pa.Array:
        if column not in names or not values:
            return false
        found = pc.is_in(table[column], value_set=pa.array(sorted(values), pa.string()))
        return pc.fill_null(found, False)

    linked = false
    for column in ID_COLUMNS:
        linked = pc.or_(linked, member(column, keys.ids_of(column)))
    mask = member(USER_COLUMN, frozenset({keys.user_id}))
    if USER_COLUMN in names:  # a row naming another user is theirs, whatever ids it shares
        linked = pc.and_(linked, pc.is_null(table[USER_COLUMN]))
    mask = pc.or_(mask, linked)
    if ENTITY_COLUMN in names:
        mask = pc.or_(mask, _entity_has_user(table[ENTITY_COLUMN], keys.user_id))
    return mask


def is_users_record(record: Mapping[str, Any], keys: UserKeys) -> bool:
    """:func:`user_rows` for one decoded event (a dead letter's body)."""
    user = record.get(USER_COLUMN)
    if user is not None:
        return bool(user == keys.user_id)
    entity = record.get(ENTITY_COLUMN)
    if isinstance(entity, str) and keys.user_id in entity.split(ENTITY_ID_SEPARATOR):
        return True
    return any(record.get(c) in keys.ids_of(c) for c in ID_COLUMNS)


def user_files(lake: Path | Store, topic: str, keys: UserKeys) -> list[str]:
    """The lake files of `topic` holding a row of the user (read, not changed)."""
    store = Store.at(lake)
    columns = {USER_COLUMN, ENTITY_COLUMN, *ID_COLUMNS}
    found = []
    for path in lake_files(store, topic):
        present = [c for c in pq.read_schema(path, filesystem=store.fs).names if c in columns]
        table = pq.read_table(path, columns=present, filesystem=store.fs)
        if pc.any(user_rows(table, keys)).as_py():
            found.append(path)
    return found


def _entity_has_user(entity_ids: pa.ChunkedArray, user_id: str) -> pa.Array:
    sep = ENTITY_ID_SEPARATOR
    return pa.array(
        [e is not None and user_id in e.split(sep) for e in entity_ids.to_pylist()], pa.bool_()
    )


@holds_maintenance_lock  # never interleaved with a compaction (processors.lake.maintenance)
def erase_user(
    lake: Path | Store,
    /,
    user_id: str,
    *,
    keys: UserKeys | None = None,
    erasure_id: str | None = None,
    topics: Sequence[str] = USER_TOPICS,
    report: ErasureReport | None = None,
) -> ErasureReport:
    """Remove every lake row of `user_id` (a pseudonym) from `topics` (default: all).

    Files keep their names, schemas and offset ranges (see the module docstring); files without
    the user's rows are not touched. `keys` defaults to :func:`user_keys` (read before the
    suggestions are rewritten: they hold the keys). `report`: one to add to (an erasure done in
    steps). Idempotent: a second run removes nothing. ErasureError for an empty id.
    """
    if not user_id:
        raise ErasureError("the user id is empty; pass the user's pseudonym (or --raw with the id)")
    report = report or ErasureReport(erasure_id or uuid.uuid4().hex, user_id)
    store = Store.at(lake)
    keys = keys or user_keys(store, user_id)
    for topic in topics:
        removed = 0
        for path in lake_files(store, topic):
            table = pq.read_table(path, filesystem=store.fs)
            mask = user_rows(table, keys)
            count = pc.sum(mask).as_py() or 0
            if count:
                still_held(store)
                write_parquet(store, store.key(path), table.filter(pc.invert(mask)))
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
    lake: Path | Store, /, days: float, *, now: datetime | None = None, dry_run: bool = False,
) -> RetentionReport:  # fmt: skip
    """Delete every `<lake>/<table>/dt=*/hour=*` folder whose hour ended more than `days` ago
    (in an object store: every object under that prefix; the report lists the folders' paths
    in the store's filesystem). `dry_run`: report, delete nothing.

    A folder holding the newest file of a partition is kept: the sink resumes from the largest
    offset on disk, and without any file it would re-read the topic from its beginning.
    ErasureError for days <= 0.
    """
    if days <= 0:
        raise ErasureError(f"retention must be longer than 0 days, got {days}")
    cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
    report = RetentionReport()
    store = Store.at(lake)
    if store.local_dir is None:
        _retain_in_store(store, cutoff, report, dry_run)
        return report
    lake = store.local_dir
    for table_dir in sorted(p for p in lake.iterdir() if p.is_dir()) if lake.is_dir() else []:
        anchors = _newest_file_dirs(lake, table_dir.name)
        for folder in sorted(table_dir.glob("dt=*/hour=*")):
            ends = _hour_start(folder) + timedelta(hours=1)
            if ends > cutoff:
                continue
            if folder in anchors:
                report.kept_for_resume.append(folder)
                continue
            if not dry_run:
                shutil.rmtree(folder)
            report.deleted.append(folder)
        for day in table_dir.glob("dt=*"):
            if not dry_run and day.is_dir() and not any(day.iterdir()):
                os.rmdir(day)
    return report


def _retain_in_store(
    store: Store, cutoff: datetime, report: RetentionReport, dry_run: bool
) -> None:
    """`retain` in an object store: an hour "folder" is the prefix of its objects."""
    for table in topic_dirs(store):
        anchors = {Path(p) for p in _newest_file_dirs(store, table)}
        hours: dict[str, list[str]] = {}
        for stored in store.files(table):
            parts = stored.key.split("/")
            if len(parts) >= 4 and parts[1].startswith("dt=") and parts[2].startswith("hour="):
                hours.setdefault("/".join(parts[:3]), []).append(stored.key)
        for prefix, keys in sorted(hours.items()):
            folder = Path(store.path(prefix))
            if _hour_start(folder) + timedelta(hours=1) > cutoff:
                continue
            if folder in anchors:
                report.kept_for_resume.append(folder)
                continue
            if not dry_run:
                still_held(store)
                for key in keys:
                    store.delete(key)
            report.deleted.append(folder)


def _newest_file_dirs(lake: Path | Store, topic: str) -> set[Path]:
    scan = scan_topic(lake, topic)
    return {Path(max(files).path).parent for files in scan.files.values() if files}


def _hour_start(folder: Path) -> datetime:
    try:
        day = folder.parent.name.removeprefix("dt=")
        hour = int(folder.name.removeprefix("hour="))
        return datetime.fromisoformat(day).replace(hour=hour, tzinfo=UTC)
    except ValueError as exc:
        raise ErasureError(
            f"{folder} is not a dt=YYYY-MM-DD/hour=HH folder; move it out of the lake"
        ) from exc
