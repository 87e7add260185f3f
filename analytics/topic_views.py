"""One view per lake topic: which topics the lake holds and the SQL of their views.

A topic's view reads every visible file of the topic::

    read_parquet('<abs lake>/<topic>/**/*.parquet', hive_partitioning = true,
                 union_by_name = true, hive_types = {'dt': 'DATE', 'hour': 'INTEGER'})

`*.parquet` never matches the sink's temporary files (`.<name>.<token>.tmp`), so a view sees
whole files only, also while the sink writes. `union_by_name` unions the columns of files
written with different schema versions (a column missing from older files reads as NULL), and
DuckDB re-binds a view at each query, so new columns appear without rebuilding the catalog.

A lake topic (one of `streams.topics.LAKE_TOPIC_SCHEMAS`) with no file yet still gets a
view: an empty one with the columns its Avro schema gives in the lake, so the analyst views over
it are always creatable and return no rows instead of failing. Other topic directories get a
view only once they hold a file.

A lake in an object store (`ground.store`; DuckDB's own S3 reader is an extension that
downloads at run time, which many machines cannot) is read through pyarrow instead: each topic's
visible files, listed once when the views are made (`scan_topic`, so a compaction's superseded
inputs are left out; other `*.parquet` files of a table that is not a topic are read too, as on
disk), become a pyarrow dataset with the same hive columns, registered in DuckDB
as `_files_<view>` (`register_datasets`); the view selects from it with the same dedupe. DuckDB
pushes filters and projections into the dataset scan, so `dt`/`hour` filters prune files. The
file list is fixed per connection: open a new one (`flywheel query` does, per run) to see newer
files. The schema is the topic's Avro schema in lake form (`arrow_schema`), so files of older
schema versions read their missing columns as NULL, as `union_by_name` does on disk.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from analytics.errors import CatalogError
from contracts.arrow_schema import arrow_schema
from contracts.lake_layout import SUFFIX, scan_topic, topic_dirs
from ground.store import Store
from schemas.catalog import load_schema
from streams.topics import LAKE_TOPIC_SCHEMAS, TOPIC_VALUE_SCHEMAS

_TOPIC = re.compile(r"[A-Za-z0-9._-]+")  # Kafka's legal topic characters (as processors.lake)
# The lake's hive keys: `dt=YYYY-MM-DD` is the UTC event date, `hour=HH` its UTC hour.
HIVE_COLUMNS: tuple[tuple[str, str], ...] = (("dt", "DATE"), ("hour", "INTEGER"))


@dataclass(frozen=True)
class TopicView:
    """The view of one topic: `has_files` False means the empty, schema-typed view."""

    topic: str
    name: str
    has_files: bool
    sql: str  # the SELECT the view is defined as
    files: tuple[str, ...] = field(default=(), repr=False)  # an object store's: its dataset


def view_name(topic: str) -> str:
    """The view of `topic`: '.' and '-' become '_' (`telemetry.suggestions` ->
    `telemetry_suggestions`), so it is a plain SQL identifier."""
    return re.sub(r"[^A-Za-z0-9_]", "_", topic)


def sql_string(text: str) -> str:
    """`text` as a SQL string literal (single quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


def quote_identifier(name: str) -> str:
    """`name` as a quoted SQL identifier (double quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'


def topics_with_files(lake: Path) -> list[str]:
    """Sorted names of the directories under `lake` that hold at least one `*.parquet` file.

    Cheap: it stops at each topic's first file. Names that cannot be Kafka topics and names
    starting with '.' are skipped. A missing `lake` gives [].
    """
    try:
        entries = list(os.scandir(lake))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CatalogError(f"cannot list the lake {lake}: {exc}; check FLYWHEEL_LAKE") from exc
    found = []
    for entry in entries:
        if entry.name.startswith(".") or not _TOPIC.fullmatch(entry.name):
            continue
        if entry.is_dir() and next(_parquet_files(Path(entry.path)), None) is not None:
            found.append(entry.name)
    return sorted(found)


def _parquet_files(root: Path) -> Iterator[Path]:
    # os.walk ignores directories vanishing mid-walk (a sink creating them is fine too).
    for directory, _, names in os.walk(root):
        for name in names:
            if name.endswith(SUFFIX) and not name.startswith("."):
                yield Path(directory) / name


def topic_views(lake: Path | Store) -> list[TopicView]:
    """The topic views of `lake`: every topic with files, then every platform topic without
    files (typed, empty), sorted by view name. Two topics mapping to one view name (`a.b` and
    `a_b`) would collide: CatalogError naming both. A Path's views read the files with
    DuckDB's `read_parquet`; a Store's, its registered datasets (`register_datasets`)."""
    if isinstance(lake, Store):
        views = _store_views(lake)
        with_files = [v.topic for v in views]
    else:
        lake = lake.absolute()
        with_files = topics_with_files(lake)
        views = [TopicView(t, view_name(t), True, parquet_sql(lake, t)) for t in with_files]
    views += [
        TopicView(t, view_name(t), False, empty_sql(t))
        for t in LAKE_TOPIC_SCHEMAS
        if t not in with_files
    ]
    by_name: dict[str, str] = {}
    for view in views:
        other = by_name.setdefault(view.name, view.topic)
        if other != view.topic:
            raise CatalogError(
                f"topics {other!r} and {view.topic!r} would both be view {view.name!r}; "
                f"remove or rename one of their directories under {lake}"
            )
    return sorted(views, key=lambda v: v.name)


def parquet_sql(lake: Path, topic: str) -> str:
    """The SELECT over every visible file of `topic` in `lake` (an absolute path), one row per
    event: a platform topic's rows repeating its `dedupe_key` keep the first (lowest partition
    and offset)."""
    pattern = sql_string(str(lake / topic / "**" / f"*{SUFFIX}"))
    hive_types = ", ".join(f"{sql_string(k)}: {sql_string(t)}" for k, t in HIVE_COLUMNS)
    # Every interpolated value went through sql_string (quotes doubled): no injection.
    return deduplicated(
        f"SELECT * FROM read_parquet({pattern}, hive_partitioning = true, "  # noqa: S608
        f"union_by_name = true, hive_types = {{{hive_types}}})",
        topic,
    )


def dataset_relation(view: str) -> str:
    """The name a store-backed view's pyarrow dataset is registered under."""
    return f"_files_{view}"


def _store_views(lake: Store) -> list[TopicView]:
    views = []
    for topic in _store_topics(lake):
        scan = scan_topic(lake, topic)
        files = tuple([*(f.path for part in scan.files.values() for f in part), *scan.others])
        if files:
            name = view_name(topic)
            select = f"SELECT * FROM {quote_identifier(dataset_relation(name))}"  # noqa: S608
            views.append(TopicView(topic, name, True, deduplicated(select, topic), files))
    return views


def _store_topics(lake: Store) -> list[str]:
    """The topic "directories" directly under an object-store lake (one delimiter listing)."""
    try:
        names = topic_dirs(lake)
    except OSError as exc:
        raise CatalogError(f"cannot list the lake {lake}: {exc}; check FLYWHEEL_LAKE") from exc
    return [n for n in names if _TOPIC.fullmatch(n)]


def register_datasets(con: duckdb.DuckDBPyConnection, lake: Store, views: list[TopicView]) -> None:
    """Register the pyarrow dataset of each store-backed view on `con` (module docstring)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    hive = pa.schema([("dt", pa.date32()), ("hour", pa.int32())])
    for view in views:
        if not view.files:
            continue
        base = lake.path(view.topic)
        schema = None
        if view.topic in TOPIC_VALUE_SCHEMAS:
            lake_schema = arrow_schema(load_schema(TOPIC_VALUE_SCHEMAS[view.topic]))
            schema = pa.schema([*lake_schema, *hive], metadata=lake_schema.metadata)
        dataset = ds.dataset(
            list(view.files), schema=schema, format="parquet", filesystem=lake.fs,
            partitioning=ds.partitioning(hive, flavor="hive"), partition_base_dir=base,
        )  # fmt: skip
        con.register(dataset_relation(view.name), dataset)


def deduplicated(select: str, topic: str) -> str:
    """`select` (all of a topic's rows) keeping one row per event of a platform topic."""
    key = dedupe_key(topic)
    if key is None:
        return select
    # A re-sent event keeps its event time, hence its dt/hour: partitioning by them too lets
    # DuckDB push filters on dt/hour below the window, so they still prune files.
    return (
        f"{select} QUALIFY row_number() OVER (PARTITION BY dt, hour, {quote_identifier(key)} "
        "ORDER BY _partition, _offset) = 1"
    )


@functools.cache  # a pure function of the schemas shipped with the code
def dedupe_key(topic: str) -> str | None:
    """The column whose repeats are one event in `topic`'s view: `reward_id` for Rewards (a
    re-emitted Reward has a fresh event_id), else `event_id`, which every producer makes once
    per event and re-sends unchanged (the SDK's spool is at-least-once). None for topics
    outside the platform's schemas."""
    if topic not in TOPIC_VALUE_SCHEMAS:
        return None
    fields = {f["name"] for f in load_schema(TOPIC_VALUE_SCHEMAS[topic])["fields"]}
    return next((k for k in ("reward_id", "event_id") if k in fields), None)


@functools.cache  # a pure function of the schemas shipped with the code
def empty_sql(topic: str) -> str:
    """An empty SELECT with the lake columns of platform `topic` (its Avro fields, `_topic`,
    `_partition`, `_offset`, then `dt` and `hour`), typed as DuckDB reads them from Parquet."""
    schema = arrow_schema(load_schema(TOPIC_VALUE_SCHEMAS[topic]))
    with duckdb.connect() as con:
        relation = con.from_arrow(schema.empty_table())
        columns = [(str(n), str(t)) for n, t in zip(relation.columns, relation.types, strict=True)]
    columns += list(HIVE_COLUMNS)
    select = ", ".join(f"CAST(NULL AS {t}) AS {quote_identifier(n)}" for n, t in columns)
    return f"SELECT {select} WHERE false"
