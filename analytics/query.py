"""Running analyst SQL: connections with the catalog's views, results, readable errors.

Python entry points for notebooks (docs/analysts.md)::

    import analytics
    analytics.query("select * from acceptance_by_version", ".flywheel/lake").fetchall()
    table = analytics.to_arrow("select * from suggestion_funnel", ".flywheel/lake")

The lake is a parameter (a library reads no environment); `flywheel query` resolves its default
from the settings (FLYWHEEL_LAKE, else $FLYWHEEL_HOME/lake).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from analytics.catalog import META_TABLE, Catalog
from analytics.errors import AnalyticsError, QueryError, UnknownViewError
from ground.store import Store


@dataclass(frozen=True)
class ViewInfo:
    """A view of the catalog: kind ('topic' or 'analyst'), description, (column, type) pairs."""

    name: str
    kind: str
    description: str
    columns: tuple[tuple[str, str], ...]


def resolve_lake(lake: Path | str | Store | None) -> Path | Store:
    """`lake` as a directory, or a store for an `s3://` URI (credentials and endpoint from the
    environment, `ground.storage`); AnalyticsError naming the fix when it is None."""
    if lake is None:
        raise AnalyticsError(
            "no lake given: pass the lake directory (e.g. analytics.query(sql, '.flywheel/lake')) "
            "or a connection from analytics.connect(lake) as con="
        )
    if isinstance(lake, Store):
        return lake
    return Store.at(str(lake)) if str(lake).startswith("s3://") else Path(lake)


def connect(lake: Path | str | Store) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with every catalog view (see `Catalog.connect`); `lake`
    is a directory, an `s3://bucket/prefix` or a store.

    Raises EmptyLakeError when the lake has no Parquet file yet.
    """
    return Catalog(resolve_lake(lake)).connect()


def query(
    sql: str,
    lake: Path | str | None = None,
    *,
    con: duckdb.DuckDBPyConnection | None = None,
) -> duckdb.DuckDBPyRelation:
    """The relation of `sql` over the catalog's views (lazy: it runs on `.fetchall()`,
    `.to_arrow_table()`, `.df()`, ...). Pass `con` (from `connect`) to reuse one connection across
    queries; otherwise a fresh one is made for `lake`.

    Raises QueryError (UnknownViewError for a missing table or view) with DuckDB's message and
    the line and column it points at; EmptyLakeError for an empty lake.
    """
    con = connect(resolve_lake(lake)) if con is None else con
    try:
        relation = con.sql(sql)
    except duckdb.Error as exc:
        raise query_error(con, sql, exc) from exc
    if relation is None:  # statements without a result (SET, ...) in some DuckDB versions
        relation = con.sql("SELECT 'OK' AS status")
    return relation


def to_arrow(
    sql: str, lake: Path | str | None = None, *, con: duckdb.DuckDBPyConnection | None = None
) -> pa.Table:
    """The result of `sql` as an Arrow table; errors as `query`."""
    con = connect(resolve_lake(lake)) if con is None else con
    relation = query(sql, con=con)
    try:
        return relation.to_arrow_table()
    except duckdb.Error as exc:  # errors found while running, not while binding
        raise QueryError(_describe(str(exc), sql)) from exc


def list_views(con: duckdb.DuckDBPyConnection, catalog: Catalog | None = None) -> list[ViewInfo]:
    """The views of `con` with their columns, topic views first; descriptions from `catalog`."""
    described = {}
    if catalog is not None:
        described = {d.name: (d.kind, d.description) for d in catalog.definitions()}
    rows = con.execute(
        "SELECT table_name, column_name, data_type FROM duckdb_columns() "
        "WHERE schema_name = 'main' AND table_name IN "
        "(SELECT view_name FROM duckdb_views() WHERE NOT internal) "
        "ORDER BY table_name, column_index"
    ).fetchall()
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, column, data_type in rows:
        columns.setdefault(str(table), []).append((str(column), str(data_type)))
    views = [
        ViewInfo(name, *described.get(name, ("view", "")), tuple(cols))
        for name, cols in columns.items()
    ]
    order = list(described)
    return sorted(views, key=lambda v: order.index(v.name) if v.name in order else len(order))


def view_names(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Names of the views (and tables other than the catalog's own) visible on `con`."""
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE NOT internal UNION ALL "
        "SELECT view_name FROM duckdb_views() WHERE NOT internal"
    ).fetchall()
    return sorted(str(r[0]) for r in rows if r[0] != META_TABLE)


def query_error(con: duckdb.DuckDBPyConnection, sql: str, exc: duckdb.Error) -> QueryError:
    """A QueryError for `sql`'s failure `exc`, with the line and column DuckDB points at.

    The relation API drops DuckDB's position, so the statement is executed once more with
    `errors_as_json` to get it (it fails again at the same place: binding and parsing have no
    side effects). A missing table or view gives UnknownViewError listing the views.
    """
    detail = _json_error(con, sql)
    if detail is None:
        return QueryError(_describe(str(exc), sql))
    kind = detail.get("exception_type", type(exc).__name__)
    message = str(detail.get("exception_message", exc))
    position = detail.get("position")
    where = _point(sql, int(position)) if position is not None else ""
    text = f"{kind} Error: {message}{where}"
    missing = detail.get("error_subtype") == "MISSING_ENTRY" and detail.get("type") in (
        "Table",
        "View",
    )
    if missing:
        return UnknownViewError(f"{text}\nviews: {', '.join(view_names(con))}")
    return QueryError(text)


def _json_error(con: duckdb.DuckDBPyConnection, sql: str) -> dict[str, Any] | None:
    try:
        con.execute("SET errors_as_json = true")
        try:
            con.execute(sql)
        finally:
            con.execute("RESET errors_as_json")
    except duckdb.Error as again:
        text = str(again)
        start = text.find("{")
        try:
            parsed = json.loads(text[start:]) if start >= 0 else None
        except json.JSONDecodeError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def _describe(message: str, sql: str) -> str:
    """DuckDB's own message; it already carries `LINE n:` and a caret when it knows where."""
    return message.strip() + ("" if "LINE " in message else f"\nin: {sql.strip()[:200]}")


def _point(sql: str, position: int) -> str:
    """' at line L, column C' and the line of `sql` with a caret under character `position`."""
    before = sql[:position]
    line_no = before.count("\n") + 1
    column = position - (before.rfind("\n") + 1)
    line = sql.splitlines()[line_no - 1] if sql.splitlines() else sql
    return f"\nat line {line_no}, column {column + 1}:\n  {line}\n  {' ' * column}^"
