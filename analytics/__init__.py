"""Analyst SQL over the Parquet lake: the DuckDB catalog, its views and `flywheel query`."""
