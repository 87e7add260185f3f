"""The DuckDB catalog of the lake: `<lake>/catalog.duckdb` and the connections queries run on.

Two products, from one list of view definitions (topic views, then the analyst views):

- **`catalog.duckdb`**, for other tools (`duckdb -readonly lake/catalog.duckdb`, BI, notebooks
  that prefer a file): the views plus a `flywheel_catalog` table (key, value) holding the
  fingerprint of the definitions it was built from. `refresh` rewrites it only when the
  fingerprint changed (a topic appeared or got its first file, a view started or stopped
  binding, the code's SQL changed), in one short read-write transaction; otherwise it costs a
  scan of the topic directories (stopping at each topic's first file) and one brief read-only
  open. New *columns* need no rebuild: DuckDB re-binds a view at each query and
  `union_by_name` unions the files' columns.
- **`connect()`**, what `flywheel query` and `analytics.query` use: an in-memory DuckDB with the
  same views. So a query, or a notebook holding a connection for hours, never holds the
  catalog file's lock, and two processes can query at once. DuckDB lets one process open a file
  read-write *or* any number read-only; a refresh that finds the file locked retries for
  `lock_timeout_s`, then leaves it for the next refresh (a warning is logged) — queries are
  unaffected.

A lake in an object store (`ground.store`) has no `catalog.duckdb`: its views read pyarrow
datasets registered on the connection (`analytics.topic_views`), which a file cannot hold, so
`connect()` is the way in there.

Safe while the sink writes: the views read only `*.parquet`, and the sink renames whole files
into place, so a query sees each file completely or not at all.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

from analytics.errors import CatalogError, EmptyLakeError
from analytics.topic_views import TopicView, quote_identifier, register_datasets, topic_views
from analytics.views import ANALYST_VIEWS
from ground.store import Store

CATALOG_FILE = "catalog.duckdb"
META_TABLE = "flywheel_catalog"
FORMAT_VERSION = 1  # bump when the file's layout (not the views' SQL) changes
_LOCK_RETRY_S = 0.05
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ViewDefinition:
    """A view the catalog creates: `kind` is 'topic' or 'analyst'; `topic` and `has_files`
    describe a topic view (`has_files` False: the empty, schema-typed view)."""

    name: str
    kind: str
    sql: str
    description: str
    topic: str | None = None
    has_files: bool = True


def empty_lake_message(lake: Path | Store) -> str:
    """What to say when `lake` has no Parquet file: where it looked and how to fill it."""
    return (
        f"the lake {lake} holds no Parquet files yet; fill it with `flywheel demo` (the whole "
        "loop) or `flywheel simulate` + `flywheel sink`, or point FLYWHEEL_LAKE at a lake"
    )


class Catalog:
    """The catalog of one lake: a directory or a store (see the module docstring)."""

    def __init__(self, lake: Path | Store, *, lock_timeout_s: float = 2.0) -> None:
        if isinstance(lake, Store) and lake.local_dir is not None:
            lake = lake.local_dir
        # A local lake is a Path (catalog.duckdb beside it); an object store stays a Store.
        self.lake: Path | Store = lake if isinstance(lake, Store) else lake.expanduser().absolute()
        self.lock_timeout_s = lock_timeout_s
        self.skipped: dict[str, str] = {}  # analyst view -> why it could not be created
        self.rewrote = False  # whether the last connect/refresh rewrote catalog.duckdb

    @property
    def path(self) -> Path:
        """`<lake>/catalog.duckdb` (a local lake's)."""
        if isinstance(self.lake, Store):
            raise CatalogError(f"a lake in an object store ({self.lake}) has no catalog file")
        return self.lake / CATALOG_FILE

    def definitions(self, topics: list[TopicView] | None = None) -> list[ViewDefinition]:
        """Topic views (sorted; `topics`, else those of the lake now), then analyst views
        (dependency order).

        Raises EmptyLakeError when no topic directory holds a Parquet file.
        """
        topics = topic_views(self.lake) if topics is None else topics
        if not any(t.has_files for t in topics):
            raise EmptyLakeError(empty_lake_message(self.lake))
        defs = [
            ViewDefinition(
                t.name,
                "topic",
                t.sql,
                f"one row per event of topic {t.topic}"
                + ("" if t.has_files else " (no files yet)"),
                t.topic,
                t.has_files,
            )
            for t in topics
        ]
        defs += [ViewDefinition(v.name, "analyst", v.sql, v.description) for v in ANALYST_VIEWS]
        return defs

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with every view; refreshes `catalog.duckdb` first.

        Session settings: TimeZone UTC (timestamps print in UTC everywhere) and the Parquet
        metadata cache (lake files never change once visible). An analyst view that does not
        bind (say, a column its SQL needs is in no file) is left out and listed in `skipped`.
        Raises EmptyLakeError for a lake without files, CatalogError when a topic view fails.
        """
        topics = topic_views(self.lake)
        defs = self.definitions(topics)
        con = duckdb.connect()
        try:
            con.execute("SET TimeZone = 'UTC'")
            con.execute("SET parquet_metadata_cache = true")
            if isinstance(self.lake, Store):
                register_datasets(con, self.lake, topics)
            self.skipped = create_views(con, defs)
            self.rewrote = False if isinstance(self.lake, Store) else self._sync_file(defs)
        except BaseException:
            con.close()
            raise
        return con

    def refresh(self) -> bool:
        """Rebuild `catalog.duckdb` if its definitions changed; True when it was rewritten.

        Raises EmptyLakeError / CatalogError as `connect`; a file locked by another process is
        left as it is (False, a warning is logged).
        """
        self.connect().close()
        return self.rewrote

    def _sync_file(self, defs: list[ViewDefinition]) -> bool:
        kept = [d for d in defs if d.name not in self.skipped]
        fingerprint = _fingerprint(kept, self.skipped)
        try:
            if self._stored_fingerprint() == fingerprint:
                return False
            self._write(kept, fingerprint)
        except _Locked:
            log.warning(
                "%s is locked by another process; left as it is until the next refresh", self.path
            )
            return False
        return True

    def _stored_fingerprint(self) -> str | None:
        if not self.path.exists():
            return None
        try:
            con = self._open(read_only=True)
        except duckdb.Error:
            return None  # unreadable (another DuckDB version, damaged): rewrite it
        try:
            row = con.execute(
                f"SELECT value FROM {META_TABLE} WHERE key = 'fingerprint'"  # noqa: S608  # constant
            ).fetchone()
        except duckdb.Error:
            return None
        finally:
            con.close()
        return None if row is None else str(row[0])

    def _write(self, defs: list[ViewDefinition], fingerprint: str) -> None:
        try:
            con = self._open(read_only=False)
        except duckdb.Error as exc:  # not a lock: a damaged or foreign file; start afresh
            log.warning("replacing unreadable catalog %s (%s)", self.path, exc)
            for stale in (self.path, self.path.with_name(CATALOG_FILE + ".wal")):
                stale.unlink(missing_ok=True)
            con = self._open(read_only=False)
        try:
            con.execute("BEGIN TRANSACTION")
            old = con.execute(
                "SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = 'main'"
            ).fetchall()
            for (name,) in old:
                con.execute(f"DROP VIEW IF EXISTS {quote_identifier(name)}")
            for d in defs:
                con.execute(f"CREATE VIEW {quote_identifier(d.name)} AS {d.sql}")
            con.execute(f"CREATE OR REPLACE TABLE {META_TABLE} (key VARCHAR, value VARCHAR)")
            meta = {
                "fingerprint": fingerprint,
                "format_version": str(FORMAT_VERSION),
                "lake": str(self.lake),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "skipped": json.dumps(self.skipped, sort_keys=True),
            }
            insert = f"INSERT INTO {META_TABLE} VALUES (?, ?)"  # noqa: S608  # a constant name
            con.executemany(insert, list(meta.items()))
            con.execute("COMMIT")
        except duckdb.Error as exc:
            raise CatalogError(f"could not write {self.path}: {exc}") from exc
        finally:
            con.close()

    def _open(self, *, read_only: bool) -> duckdb.DuckDBPyConnection:
        """Open the catalog file, retrying while another process holds its lock; _Locked when
        it stays locked for `lock_timeout_s`. Other DuckDB errors propagate."""
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=read_only)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower():
                    raise
                if time.monotonic() >= deadline:
                    raise _Locked(str(exc)) from exc
                time.sleep(_LOCK_RETRY_S)


class _Locked(Exception):
    """The catalog file stayed locked by another process (internal: refresh skips the write)."""


def create_views(con: duckdb.DuckDBPyConnection, defs: list[ViewDefinition]) -> dict[str, str]:
    """Create every view of `defs` on `con`, in order; returns the analyst views that did not
    bind, with DuckDB's reason. A topic view that fails raises CatalogError (its files are
    unreadable, so every query over it would fail too)."""
    skipped: dict[str, str] = {}
    for d in defs:
        try:
            con.execute(f"CREATE OR REPLACE VIEW {quote_identifier(d.name)} AS {d.sql}")
        except duckdb.Error as exc:
            if d.kind == "topic":
                raise CatalogError(
                    f"the view of topic {d.topic} cannot read its files: {exc}; check the "
                    f"Parquet files under {d.topic}/ in the lake"
                ) from exc
            skipped[d.name] = str(exc).splitlines()[0]
            log.warning("analyst view %s left out: %s", d.name, skipped[d.name])
    return skipped


def _fingerprint(defs: list[ViewDefinition], skipped: dict[str, str]) -> str:
    digest = hashlib.sha256(f"format {FORMAT_VERSION}\n".encode())
    for d in defs:
        digest.update(f"{d.name}\n{d.sql}\n".encode())
    digest.update(json.dumps(sorted(skipped)).encode())
    return digest.hexdigest()
