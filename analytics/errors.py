"""Errors the analytics package raises on purpose; each message says what was wrong and the fix.

`flywheel query` turns every one of them into a one-line message and exit status 1.
"""

from ground.errors import FlywheelError


class AnalyticsError(FlywheelError):
    """Base class of the analytics package's errors."""


class EmptyLakeError(AnalyticsError):
    """The lake directory is missing or holds no Parquet file yet: nothing to query."""


class CatalogError(AnalyticsError):
    """The DuckDB catalog could not be built (a view failed, the lake path is unusable)."""


class QueryError(AnalyticsError):
    """DuckDB refused or failed the SQL; the message carries its error and the position."""


class UnknownViewError(QueryError):
    """The SQL names a table or view the catalog does not have; the message lists the views."""


class OutputError(AnalyticsError):
    """A result could not be written in the requested format or to the requested path."""
