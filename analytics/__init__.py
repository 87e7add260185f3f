"""Analyst SQL over the Parquet lake: the DuckDB catalog, its views and `flywheel query`.

`Catalog(lake)` keeps `<lake>/catalog.duckdb` (one view per topic plus the analyst views of
`analytics.views`) and gives in-memory connections with the same views; `query` / `to_arrow`
run SQL for notebooks. See docs/analysts.md.
"""

from analytics.catalog import CATALOG_FILE, Catalog, ViewDefinition
from analytics.errors import (
    AnalyticsError,
    CatalogError,
    EmptyLakeError,
    OutputError,
    QueryError,
    UnknownViewError,
)
from analytics.query import ViewInfo, connect, list_views, query, to_arrow
from analytics.views import ANALYST_VIEWS

__all__ = [
    "ANALYST_VIEWS",
    "CATALOG_FILE",
    "AnalyticsError",
    "Catalog",
    "CatalogError",
    "EmptyLakeError",
    "OutputError",
    "QueryError",
    "UnknownViewError",
    "ViewDefinition",
    "ViewInfo",
    "connect",
    "list_views",
    "query",
    "to_arrow",
]
