"""Reward rows read back from lake files: the rows a window is built from, and the held-out rows
the gate evaluates on (they never reach MDS).

Lake files are read with pyarrow, file by file in (partition, first offset) order, so rows stay
in offset order; filters on source, reward function and model are skipped where a file's
statistics prove every row matches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from contracts.lake_layout import LakeFile
from learner.data.lake_rows import epoch_ms
from learner.data.window_manifest import WindowRecord
from learner.errors import LearnerError
from learner.recipes.gate.holdout import HoldoutSplit
from learner.recipes.gate.samples import RewardRows
from policies.context import CONTEXT_DIM

Enrich = Callable[[pa.Table], pa.Table]  # adds point-in-time feature columns to reward rows
_BASE_COLUMNS = (
    "source_id", "context", "decision", "propensity", "reward", "model_version", "event_time",
    "attributed_at", "user_id",
)  # fmt: skip


def _read_file(
    path: Path, columns: list[str] | None, reward_fn: str, model: str | None
) -> tuple[pa.Table, int]:
    """One lake file's suggestion rows of ``reward_fn`` (and ``model``), ``columns`` only, and
    the number of rows the file holds."""
    wanted = {"source": "SUGGESTION", "reward_fn": reward_fn}
    if model is not None:
        wanted["model_name"] = model
    # Low-cardinality strings as dictionaries: filtering compares a few codes, not every string.
    codes = None if columns is None else [*wanted, "decision"]
    with pq.ParquetFile(path, read_dictionary=codes) as parquet:
        # A filter column whose statistics prove that every row matches is neither read nor
        # compared (the usual case: a lake file holds one source, reward function and model).
        checks = {c: v for c, v in wanted.items() if not _all_rows_equal(parquet.metadata, c, v)}
        if columns is not None and "user_id" not in parquet.schema_arrow.names:
            columns = [c for c in columns if c != "user_id"]  # a file of Reward v1
        table = parquet.read(columns=None if columns is None else [*columns, *checks])
    total = table.num_rows
    keep = None
    for name, value in checks.items():
        equal = pc.equal(table.column(name), value)
        keep = equal if keep is None else pc.and_(keep, equal)
    # Filtering copies every column: skip it when all rows are kept.
    if keep is not None and pc.all(keep, skip_nulls=False).as_py() is not True:
        table = table.filter(keep)
    return (table if columns is None else table.select(columns)), total


def _first_per_source(table: pa.Table) -> pa.Table:
    """`table` with one row per ``source_id`` (the first in offset order): a Reward re-emitted
    (at-least-once processing, a replayed input) has the same reward_id, i.e. the same source
    and function, and must count once. Hash-based, and free when nothing repeats."""
    ids = table.column("source_id")
    if pc.count_distinct(ids).as_py() == table.num_rows:
        return table
    rows = pa.table({"source_id": ids, "row": pa.array(np.arange(table.num_rows))})
    first = rows.group_by("source_id", use_threads=False).aggregate([("row", "min")])
    return table.take(np.sort(first.column("row_min").to_numpy()))


def _all_rows_equal(metadata: pq.FileMetaData, column: str, value: str) -> bool:
    """True when the statistics of every row group prove that ``column`` is ``value`` in every
    row (min == max == value, no nulls); False when they do not, or are missing."""
    paths = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    if column not in paths:
        return False
    index = paths.index(column)
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max or not stats.has_null_count:
            return False
        # min and max bound the values even where a writer truncated them.
        if stats.null_count != 0 or stats.min != value or stats.max != value:
            return False
    return True


def read_table(
    files: Sequence[LakeFile] | Sequence[Path],
    reward_fn: str,
    split: HoldoutSplit,
    enrich: Enrich | None,
    model_name: str | None = None,
) -> tuple[pa.Table, int]:
    """Suggestion rows of ``reward_fn`` (and ``model_name``, if given) in (partition, offset)
    order with a ``held_out_mask`` column (and ``enrich``'s columns), and the number of other rows
    skipped.

    Read with pyarrow file by file (files come sorted by partition and first offset, so rows stay
    in offset order); list columns like ``context`` are read zero-copy, several times faster
    than through DuckDB. Files of older schema versions are unified by column name.
    """
    paths = [Path(f.path) if isinstance(f, LakeFile) else f for f in files]
    columns = None if enrich is not None else list(_BASE_COLUMNS)
    total = 0
    parts = []
    for path in paths:
        part, rows = _read_file(path, columns, reward_fn, model_name)
        parts.append(part)
        total += rows
    if not parts:
        raise LearnerError("no lake files to read; pass a window or at least one file.")
    table = _first_per_source(pa.concat_tables(parts, promote_options="default"))
    skipped = total - table.num_rows
    table = table.append_column("held_out_mask", pa.array(split.mask(table.column("source_id"))))
    if enrich is not None:
        before = set(table.column_names)
        table = enrich(table)
        extra = [c for c in table.column_names if c not in before]
        table = table.replace_schema_metadata({b"extra_columns": ",".join(extra).encode()})
    return table, skipped


def held_out_mask(table: pa.Table) -> np.ndarray:
    """(n,) bool: the ``held_out_mask`` column of a table read by :func:`read_table`."""
    return np.asarray(table.column("held_out_mask").to_numpy(zero_copy_only=False), dtype=bool)


def to_rows(
    table: pa.Table, context_dim: int, *, keep: np.ndarray | None = None, ids: bool = True
) -> RewardRows:
    """RewardRows of a table read by :func:`read_table`: all rows, or those where ``keep``
    (n,) bool is True, in table order. With ``ids=False`` source ids are not converted to
    Python strings (``source_id`` holds None). LearnerError for bad contexts or extra columns.
    """
    n = table.num_rows
    contexts = table.column("context")
    lengths = pc.list_value_length(contexts)
    if n and (pc.min(lengths).as_py() != context_dim or pc.max(lengths).as_py() != context_dim):
        raise LearnerError(
            f"reward rows have contexts of {pc.min(lengths).as_py()}..{pc.max(lengths).as_py()} "
            f"values (or none), expected {context_dim}; rows of another context spec need "
            "their own dataset."
        )
    metadata = table.schema.metadata or {}
    extra_names = tuple(c for c in metadata.get(b"extra_columns", b"").decode().split(",") if c)

    def rows_of(values: np.ndarray, dtype: type[np.generic]) -> np.ndarray:
        # Selecting copies, so the cast can reuse it; all rows are copied too (writable arrays).
        if keep is None:
            return values.astype(dtype)
        return np.asarray(values[keep]).astype(dtype, copy=False)

    def column(name: str, dtype: type[np.generic]) -> np.ndarray:
        return rows_of(np.asarray(table.column(name).to_numpy(zero_copy_only=False)), dtype)

    extra = None
    if extra_names:
        try:
            extra = np.stack([column(c, np.float32) for c in extra_names], axis=1)
        except (ValueError, TypeError, pa.ArrowException) as error:
            raise LearnerError(
                f"enriched columns {extra_names} must be numeric without nulls ({error}); "
                "fill or drop them in the enrich hook."
            ) from error
    flat = pc.list_flatten(contexts).to_numpy(zero_copy_only=False)
    shown = pc.equal(table.column("decision"), "SHOWN").to_numpy(zero_copy_only=False)
    event_time = epoch_ms(table.column("event_time")).to_numpy(zero_copy_only=False)
    m = n if keep is None else int(np.count_nonzero(keep))
    return RewardRows(
        source_id=column("source_id", np.object_) if ids else np.empty(m, dtype=object),
        context=rows_of(flat.reshape(n, context_dim), np.float32),
        shown=rows_of(shown, np.bool_),
        propensity=column("propensity", np.float64),
        reward=column("reward", np.float64),
        model_version=column("model_version", np.int64),
        event_time_ms=rows_of(event_time, np.int64),
        extra=extra,
        extra_columns=extra_names,
        user_id=column("user_id", np.object_) if ids and "user_id" in table.column_names else None,
    )


def load_rows(
    lake: Path,
    source: WindowRecord | Sequence[LakeFile] | Sequence[Path],
    *,
    reward_fn: str,
    holdout: bool | None,
    split: HoldoutSplit | None = None,
    enrich: Enrich | None = None,
    context_dim: int = CONTEXT_DIM,
    model_name: str | None = None,
) -> RewardRows:
    """Suggestion reward rows of ``reward_fn`` read from lake files (a window's, or given).

    ``holdout``: True → only held-out rows (the gate's data), False → only training rows (what
    the window's MDS holds), None → all. ``model_name``: only rows a version of that model
    served (a window's files hold every model's rows; its MDS holds only its model's). Rows come
    in file order, each file in offset order. Raises LearnerError for missing files or bad
    contexts.
    """
    if isinstance(source, WindowRecord):
        paths = [lake / f.path for f in source.files]
    else:
        paths = [Path(f.path if isinstance(f, LakeFile) else f) for f in source]
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise LearnerError(f"lake files {missing[:3]} are missing; was the lake moved or pruned?")
    if not paths:
        raise LearnerError("load_rows got no lake files; pass a window or at least one file.")
    table, _ = read_table(paths, reward_fn, split or HoldoutSplit(), enrich, model_name)
    if holdout is None:
        return to_rows(table, context_dim)
    held = held_out_mask(table)
    return to_rows(table, context_dim, keep=held if holdout else ~held)
