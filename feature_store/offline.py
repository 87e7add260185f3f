"""The offline path: point-in-time correct feature values from the Parquet lake, with DuckDB.

Per feature, the source rows (``RowRule.sql``, the SQL twin of what the online aggregator adds)
are grouped by (entity, event time) into *cumulative* row counts and input sums:
``C(e, t)`` = rows of entity ``e`` with ``event_time <= t``. Two ASOF joins then read, for each
entity row at time ``t``, ``C(e, t)`` (the latest group at or before ``t``: every row at ``t``
included) and ``C(e, t - window)``; their difference is exactly the rows in ``(t - window, t]``.
Nothing after ``t`` can enter: the ASOF condition is ``group time <= t``. The value is then
``semantics.finalize_sql``, the SQL twin of what the online store returns.

Only lake rows with ``event_time <= max(t)`` (and, when every feature of a source has a window,
``> min(t) - longest window``) are read; cumulative sums from a later start differ by a
constant per entity, which the subtraction cancels.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from feature_store.declarations import FeatureDeclaration, FeatureSet
from feature_store.errors import FeatureStoreError
from feature_store.online import FeatureValue
from feature_store.semantics import finalize_sql, sql_literal
from feature_store.tables import (
    TIME_COLUMN,
    append_feature_columns,
    entity_ids_of,
    feature_set_of,
    row_times_ms,
)

_GROUPS = """
SELECT eid, t,
       CAST(SUM(COUNT(*)) OVER w AS BIGINT) AS c,
       SUM(SUM(x)) OVER w AS s
FROM ({rows}) GROUP BY eid, t
WINDOW w AS (PARTITION BY eid ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
"""


def historical_features(
    entity_rows: pa.Table,
    features: Sequence[str],
    lake: Path,
    *,
    feature_set: FeatureSet | None = None,
    time_column: str = TIME_COLUMN,
) -> pa.Table:
    """``entity_rows`` plus ``<feature>`` (float64, null = undefined) and ``<feature>__count``
    (int64) columns, each the feature's value at the row's time from the lake's Parquet files.

    ``entity_rows`` has the features' entity key columns and ``time_column`` (see
    ``feature_store.tables``); ``features`` are qualified names (``user.accept_rate_24h``);
    ``lake`` is the lake root (``<lake>/<topic>/dt=…/hour=…/*.parquet``). A source topic with no
    files yet gives undefined values. Raises UnknownFeatureError, EntityRowsError, or
    FeatureStoreError when the lake's files lack a column a feature needs.

    Point in time: a row at ``t`` aggregates lake rows with ``event_time <= t`` only. Features
    for a decision made at ``t`` that must not see that decision's own reward (logged with the
    decision's event time) need rows at ``t - 1 ms``.
    """
    fs = feature_set_of(feature_set)
    chosen = fs.resolve(features)
    times = row_times_ms(entity_rows, time_column)
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        sources = _load_sources(con, chosen, Path(lake), times)
        columns = [
            _feature_values(con, f, entity_ids_of(entity_rows, f), times, sources) for f in chosen
        ]
    finally:
        con.close()
    return append_feature_columns(entity_rows, [f.qualified_name for f in chosen], columns)


def _load_sources(
    con: duckdb.DuckDBPyConnection,
    features: Sequence[FeatureDeclaration],
    lake: Path,
    times: Sequence[int],
) -> dict[str, str]:
    """Materialise each source's needed lake rows once as a temp table; returns source -> table
    for the sources that have files (features of the others are undefined)."""
    present: dict[str, str] = {}
    if not times:
        return present
    for index, source in enumerate(dict.fromkeys(f.source for f in features)):
        root = lake / source
        if not any(root.glob("**/*.parquet")):
            continue
        mine = [f for f in features if f.source == source]
        columns = sorted({c for f in mine for c in _columns_of(f)})
        bounds = [f"event_time <= epoch_ms({max(times)})"]
        windows = [f.window_ms for f in mine]
        if all(w is not None for w in windows):
            start = min(times) - max(w for w in windows if w is not None)
            bounds.append(f"event_time > epoch_ms({start})")
        glob = sql_literal(str(root / "**" / "*.parquet"))
        select = ", ".join(f'"{c}"' for c in columns)
        try:
            # Declared identifiers and escaped literals only: nothing a caller wrote.
            con.execute(
                f"CREATE TEMP TABLE src_{index} AS SELECT {select} "  # noqa: S608
                f"FROM read_parquet({glob}, hive_partitioning = true, union_by_name = true) "
                f"WHERE {' AND '.join(bounds)}"
            )
        except duckdb.BinderException as exc:
            raise FeatureStoreError(
                f"the lake's {source} files lack a column the features need ({exc}); were they "
                "written with an older schema? Re-sink the topic or drop those features"
            ) from None
        present[source] = f"src_{index}"
    return present


def _columns_of(feature: FeatureDeclaration) -> set[str]:
    rule = feature.rule
    columns = {"event_time", *(k.field for k in rule.keys), *(c.column.field for c in rule.where)}
    if rule.value is not None:
        columns.add(rule.value.field)
    if rule.predicate is not None:
        columns.add(rule.predicate.column.field)
    return columns


def _feature_values(
    con: duckdb.DuckDBPyConnection,
    feature: FeatureDeclaration,
    entity_ids: Sequence[str | None],
    times: Sequence[int],
    sources: dict[str, str],
) -> list[FeatureValue]:
    if feature.source not in sources:
        return [FeatureValue(None, 0)] * len(times)
    query = pa.table(
        {
            "row_": pa.array(range(len(times)), pa.int64()),
            "eid": pa.array(entity_ids, pa.string()),
            "t": pa.array(times, pa.int64()),
        }
    )
    con.register("entity_rows_", query)
    groups = _GROUPS.format(rows=feature.rule.sql(sources[feature.source]))
    lower = ""
    n, total = "COALESCE(hi.c, 0)", "COALESCE(hi.s, 0.0)"
    if feature.window_ms is not None:
        lower = f"ASOF LEFT JOIN groups_ lo ON q.eid = lo.eid AND q.t - {feature.window_ms} >= lo.t"
        n, total = f"({n} - COALESCE(lo.c, 0))", f"({total} - COALESCE(lo.s, 0.0))"
    value = finalize_sql(feature.aggregation, n, total, "hi.t", "q.t", feature.ttl_ms)
    sql = (
        f"WITH groups_ AS ({groups}) "  # noqa: S608
        f"SELECT q.row_, {value} AS value, {n} AS n FROM entity_rows_ q "
        f"ASOF LEFT JOIN groups_ hi ON q.eid = hi.eid AND q.t >= hi.t {lower} ORDER BY q.row_"
    )
    result = con.execute(sql).fetchall()
    con.unregister("entity_rows_")
    return [FeatureValue(v, int(c)) for _, v, c in result]
