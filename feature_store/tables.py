"""Entity rows in, feature columns out: the table form both paths share, and the model's matrix.

*Entity rows* are a ``pyarrow.Table`` with the key columns of the features' entity types
(``user_id``, ``repo_id``, ``language``, ``model_name``, ``model_version``) and a time column
(default ``event_time``: a timestamp of any unit, naive ones read as UTC, or int64 epoch ms;
compared in whole milliseconds, floored). Both :func:`online_features` and
``offline.historical_features`` return those rows with, per feature, a ``<feature>`` column
(float64, null when undefined) and a ``<feature>__count`` column (int64, source rows aggregated).

:func:`feature_matrix` turns that table into the float32 model input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from feature_store.declarations import FeatureDeclaration, FeatureSet
from feature_store.errors import EntityRowsError
from feature_store.online import AsOf, FeatureValue, OnlineFeatureStore
from feature_store.semantics import entity_id

TIME_COLUMN = "event_time"
COUNT_SUFFIX = "__count"


def count_column(feature: str) -> str:
    return f"{feature}{COUNT_SUFFIX}"


def as_table(rows: pa.Table | Sequence[Mapping[str, Any]]) -> pa.Table:
    """A table from a table or a list of dicts (one per entity row)."""
    return rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(list(rows))


def row_times_ms(table: pa.Table, time_column: str = TIME_COLUMN) -> list[int]:
    """Epoch ms of each row's time; EntityRowsError naming the fix when it is missing or null."""
    if time_column not in table.column_names:
        raise EntityRowsError(
            f"entity rows have no {time_column!r} column: add the time each row's features must "
            f"be correct at (timestamp or epoch ms); columns: {', '.join(table.column_names)}"
        )
    column = table.column(time_column)
    if column.null_count:
        raise EntityRowsError(f"{column.null_count} entity row(s) have a null {time_column!r}")
    if pa.types.is_timestamp(column.type):
        # The int64 is UTC for zoned and naive timestamps alike; floor to ms in integers.
        raw = pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False)
        if column.type.unit == "s":
            return [int(v) * 1000 for v in raw]
        per_ms = {"ms": 1, "us": 1000, "ns": 1_000_000}[column.type.unit]
        return [int(v) for v in np.floor_divide(raw, per_ms)]
    if pa.types.is_integer(column.type):
        return [int(v) for v in column.to_pylist()]
    raise EntityRowsError(
        f"entity rows' {time_column!r} is {column.type}; give a timestamp or int64 epoch ms"
    )


def entity_ids_of(table: pa.Table, feature: FeatureDeclaration) -> list[str | None]:
    """The entity id of ``feature`` in each row (None where a key is null)."""
    keys = feature.entity.keys
    missing = [k for k in keys if k not in table.column_names]
    if missing:
        raise EntityRowsError(
            f"entity rows lack {', '.join(missing)}, the key of {feature.qualified_name}'s "
            f"entity type {feature.entity.name}; columns: {', '.join(table.column_names)}"
        )
    columns = [table.column(k).to_pylist() for k in keys]
    return [
        None if any(v is None for v in vs) else entity_id(vs) for vs in zip(*columns, strict=True)
    ]


def append_feature_columns(
    table: pa.Table, features: Sequence[str], columns: Sequence[Sequence[FeatureValue]]
) -> pa.Table:
    """``table`` plus ``<feature>`` and ``<feature>__count`` columns, one value list per feature."""
    for name, values in zip(features, columns, strict=True):
        table = table.append_column(
            pa.field(name, pa.float64()), pa.array([v.value for v in values], pa.float64())
        )
        table = table.append_column(
            pa.field(count_column(name), pa.int64()),
            pa.array([v.count for v in values], pa.int64()),
        )
    return table


def online_features(
    store: OnlineFeatureStore,
    rows: pa.Table | Sequence[Mapping[str, Any]],
    features: Sequence[str],
    as_of: AsOf = None,
    *,
    time_column: str = TIME_COLUMN,
) -> pa.Table:
    """The online counterpart of ``historical_features``: same input, same output columns.

    Each row's time is ``as_of`` when given, else its ``time_column`` when the rows have one,
    else the store's watermark (the latest event time seen). Raises UnknownFeatureError,
    EntityRowsError or AsOfOutOfRangeError (see ``OnlineFeatureStore.get_many``).
    """
    table = as_table(rows)
    chosen = store.features.resolve(features)
    if as_of is None and time_column in table.column_names:
        times = row_times_ms(table, time_column)
    else:
        t = store.resolve_as_of(as_of)
        times = [0 if t is None else t] * table.num_rows
    ids = [entity_ids_of(table, f) for f in chosen]
    values = store.lookup_rows(list(features), ids, times)
    return append_feature_columns(table, [f.qualified_name for f in chosen], values)


def matrix_columns(features: Sequence[str]) -> list[str]:
    """Names of :func:`feature_matrix`'s columns: every value, then every log1p(count)."""
    return [*features, *(f"log1p({count_column(f)})" for f in features)]


def feature_matrix(table: pa.Table, features: Sequence[str]) -> np.ndarray:
    """The model input for ``features``: float32, shape (rows, 2 * len(features)).

    Columns ``0..k-1`` are the values with undefined (null) filled with 0.0; columns
    ``k..2k-1`` are ``log1p(count)``, so a model tells "0 because undefined" (count 0) from a
    real 0 and how much evidence a rate rests on. Works on the output of both
    ``online_features`` and ``historical_features``; EntityRowsError if a column is missing.
    """
    missing = [f for f in features if f not in table.column_names]
    if missing:
        raise EntityRowsError(
            f"the table has no column for {', '.join(missing)}; compute it with "
            "online_features or historical_features first"
        )
    out = np.zeros((table.num_rows, 2 * len(features)), dtype=np.float32)
    for j, name in enumerate(features):
        values = table.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
        out[:, j] = np.nan_to_num(values, nan=0.0)
        counts = table.column(count_column(name)).to_numpy(zero_copy_only=False)
        out[:, len(features) + j] = np.log1p(counts.astype(np.float64))
    return out


def feature_set_of(features: FeatureSet | None) -> FeatureSet:
    """``features`` or the shipped declarations."""
    from feature_store.declarations import load_features

    return features if features is not None else load_features()
