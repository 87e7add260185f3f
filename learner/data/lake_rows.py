"""Time bounds of lake rows read with pyarrow: what a window's record keeps of its rows' times."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc


def epoch_ms(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Epoch milliseconds of a timestamp column of any unit (DuckDB returns microseconds)."""
    return pc.cast(pc.cast(column, pa.timestamp("ms", tz="UTC")), pa.int64())


def max_ms(table: pa.Table, column: str) -> int | None:
    """Largest timestamp of ``column`` in epoch ms (None for an empty table)."""
    return _bound_ms(table, column, pc.max)


def min_ms(table: pa.Table, column: str) -> int | None:
    """Smallest timestamp of ``column`` in epoch ms (None for an empty table)."""
    return _bound_ms(table, column, pc.min)


def _bound_ms(table: pa.Table, column: str, bound: Callable[..., pa.Scalar]) -> int | None:
    if table.num_rows == 0:
        return None
    value = bound(epoch_ms(table.column(column))).as_py()
    return None if value is None else int(value)
