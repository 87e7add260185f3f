"""Query results as a rich table, CSV, JSON lines or Parquet (`flywheel query --format`).

CSV, JSON and Parquet are written by DuckDB's COPY from the Arrow result, so every type reads
back as DuckDB writes it: timestamps in UTC ISO form, maps and structs as JSON objects in JSON,
nested values as DuckDB's text form in CSV. JSON is one object per line (JSON Lines).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import duckdb
import pyarrow as pa
from rich.table import Table

from analytics.errors import OutputError
from analytics.topic_views import sql_string

Format = Literal["table", "csv", "json", "parquet"]
FORMATS: tuple[Format, ...] = ("table", "csv", "json", "parquet")
_COPY_OPTIONS = {
    "csv": "FORMAT csv, HEADER true",
    "json": "FORMAT json",
    "parquet": "FORMAT parquet, COMPRESSION zstd",
}


def rich_table(result: pa.Table, max_rows: int) -> Table:
    """The first `max_rows` rows of `result` as a rich Table (NULL shown as 'NULL'); the
    caption says how many rows were left out."""
    table = Table(show_header=True, header_style="bold")
    for field in result.schema:
        numeric = pa.types.is_integer(field.type) or pa.types.is_floating(field.type)
        # fold, not crop: a column name is never cut to "model_…"
        table.add_column(field.name, justify="right" if numeric else "left", overflow="fold")
    shown = result.slice(0, max_rows).to_pylist()
    for row in shown:
        table.add_row(*(_cell(v) for v in row.values()))
    if result.num_rows > len(shown):
        table.caption = (
            f"{len(shown)} of {result.num_rows} rows; use --limit, or --format csv/json/parquet"
        )
    else:
        table.caption = f"{result.num_rows} row{'s' if result.num_rows != 1 else ''}"
    return table


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    return str(value)


def write_file(result: pa.Table, fmt: Format, path: Path) -> None:
    """Write `result` to `path` in `fmt` (csv, json or parquet), replacing an existing file.

    Raises OutputError naming the path when it cannot be written.
    """
    if fmt not in _COPY_OPTIONS:
        raise OutputError(f"cannot write format {fmt!r} to a file; use csv, json or parquet")
    if path.is_dir():
        raise OutputError(f"--out {path} is a directory; give a file path")
    if not path.parent.exists():
        raise OutputError(f"--out {path}: directory {path.parent} does not exist; create it")
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        con.register("flywheel_result", result)
        try:
            con.execute(f"COPY flywheel_result TO {sql_string(str(path))} ({_COPY_OPTIONS[fmt]})")
        except duckdb.Error as exc:
            raise OutputError(f"could not write {fmt} to {path}: {exc}") from exc


def render_text(result: pa.Table, fmt: Format) -> str:
    """`result` as CSV or JSON-lines text (for printing to stdout)."""
    if fmt not in ("csv", "json"):
        raise OutputError(f"format {fmt!r} is not text; write it to a file with --out")
    with tempfile.TemporaryDirectory(prefix="flywheel-query-") as tmp:
        path = Path(tmp) / f"result.{fmt}"
        write_file(result, fmt, path)
        return path.read_text(encoding="utf-8")
