"""What a feature's value *is*: one definition, in Python and in SQL, side by side.

The online aggregator (``online.py``) and the offline DuckDB query (``offline.py``) both build on
this module, so every rule below has exactly two renderings here and nowhere else:

* **Columns.** ``"reward"`` is a top-level field; ``"reward_components.accepted"`` is a key of a
  map field. A missing map key, a null field and a NaN float are all *null*.
* **Conditions** (``[column, op, literal]``, ops ``== != < <= > >=``) follow SQL's three-valued
  logic: a comparison with null is not true, so a row whose filter column is null is filtered out.
* **Source rows.** A record is a row of a feature when every condition of ``where`` is true, every
  entity key is non-null and its input is non-null. The input is ``1.0`` for ``count``, the
  value column for ``mean``, and ``1.0``/``0.0`` for whether the predicate holds for ``rate``
  (a row whose predicate column is null is not a row: "accepted among shown" ignores rows that
  do not say).
* **Entity ids** are the entity's key values as text joined by ``@`` (``user:3fa9…@python``,
  ``suggestion-gate@3``).
* **Windows.** The value at time ``t`` (epoch milliseconds, UTC) aggregates exactly the rows with
  ``t - window < event_time <= t``: rows *at* ``t`` are in, rows at ``t - window`` are out, and
  equal timestamps are all in or all out. ``window=None`` ("all") has no lower bound.
* **Value.** Undefined (None) when no row is in the window, or when the entity's latest row at or
  before ``t`` is ``ttl`` or more older than ``t`` (only binds for "all" windows, since
  ``ttl >= window`` otherwise); else ``count`` → the row count, ``mean``/``rate`` → sum / count.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

Aggregation = Literal["count", "mean", "rate"]
AGGREGATIONS: tuple[Aggregation, ...] = ("count", "mean", "rate")
Op = Literal["==", "!=", "<", "<=", ">", ">="]
OPS: Mapping[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_SQL_OPS = {"==": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
# Kinds of a column: what literals it compares with and how SQL reads it.
ColumnKind = Literal["string", "integer", "float"]
Literal_ = str | int | float
ENTITY_ID_SEPARATOR = "@"
EVENT_TIME = "event_time"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


@dataclass(frozen=True)
class Column:
    """A source column: ``field`` of the record, or the value under ``key`` of a map field."""

    field: str
    kind: ColumnKind
    key: str | None = None

    @property
    def path(self) -> str:
        return self.field if self.key is None else f"{self.field}.{self.key}"

    def value(self, record: Mapping[str, Any]) -> Any:
        """The column's value in a decoded record; None for null, a missing key or NaN."""
        value = record.get(self.field)
        if self.key is not None and value is not None:
            value = value.get(self.key)
        if value.__class__ is float and math.isnan(value):
            return None
        return value

    def sql(self) -> str:
        """The same value as a DuckDB expression over a lake table (NULL where it is None)."""
        expr = _quote_ident(self.field)
        if self.key is not None:
            expr = f"{expr}[{sql_literal(self.key)}]"
        if self.kind == "float":
            expr = f"(CASE WHEN isnan({expr}) THEN NULL ELSE {expr} END)"
        return expr


@dataclass(frozen=True)
class Condition:
    """``column op literal``; not true (so filtered out) when the column is null."""

    column: Column
    op: Op
    literal: Literal_

    def holds(self, record: Mapping[str, Any]) -> bool:
        value = self.column.value(record)
        return value is not None and OPS[self.op](value, self.literal)

    def sql(self) -> str:
        """The same test as a DuckDB boolean (NULL, which WHERE treats as false, for null)."""
        return f"({self.column.sql()} {_SQL_OPS[self.op]} {sql_literal(self.literal)})"

    def __str__(self) -> str:
        return f"{self.column.path} {self.op} {self.literal!r}"


@dataclass(frozen=True)
class RowRule:
    """How records of the source become (entity id, event time, input) rows of one feature."""

    keys: tuple[Column, ...]
    where: tuple[Condition, ...]
    aggregation: Aggregation
    value: Column | None  # mean: the averaged column
    predicate: Condition | None  # rate: the 0/1 event

    def row(self, record: Mapping[str, Any]) -> tuple[str, int, float] | None:
        """``(entity_id, event_time_ms, input)``, or None when the record is no row of it."""
        return self.keyed_input(record) if self.passes(record) else None

    def passes(self, record: Mapping[str, Any]) -> bool:
        """Whether every ``where`` condition holds (rules sharing ``where`` test it once)."""
        return all(condition.holds(record) for condition in self.where)

    def keyed_input(self, record: Mapping[str, Any]) -> tuple[str, int, float] | None:
        """:meth:`row` for a record known to pass ``where``."""
        parts = []
        for key in self.keys:
            part = key.value(record)
            if part is None:
                return None
            parts.append(str(part))
        x = self._input(record)
        if x is None:
            return None
        return ENTITY_ID_SEPARATOR.join(parts), to_epoch_ms(record[EVENT_TIME]), x

    def _input(self, record: Mapping[str, Any]) -> float | None:
        if self.aggregation == "count":
            return 1.0
        if self.aggregation == "mean" and self.value is not None:
            value = self.value.value(record)
            return None if value is None else float(value)
        if self.predicate is not None and self.predicate.column.value(record) is not None:
            return 1.0 if self.predicate.holds(record) else 0.0
        return None

    def sql(self, relation: str) -> str:
        """``SELECT eid, t, x FROM relation WHERE …``: the same rows as :meth:`row`, in SQL."""
        conditions = [c.sql() for c in self.where]
        conditions += [f"{k.sql()} IS NOT NULL" for k in self.keys]
        eid = entity_id_sql([k.sql() for k in self.keys])
        where = " AND ".join(conditions) or "true"
        # Built only from declared identifiers and escaped literals (sql_literal).
        x = self._input_sql()
        t = f"epoch_ms({_quote_ident(EVENT_TIME)})"
        return (
            f"SELECT eid, t, x FROM (SELECT {eid} AS eid, {t} AS t, "  # noqa: S608
            f"CAST({x} AS DOUBLE) AS x FROM {relation} WHERE {where}) "
            "WHERE x IS NOT NULL"
        )

    def _input_sql(self) -> str:
        if self.aggregation == "count":
            return "1.0"
        if self.aggregation == "mean" and self.value is not None:
            return self.value.sql()
        if self.predicate is not None:
            col = self.predicate.column.sql()
            pred = self.predicate.sql()
            return f"(CASE WHEN {col} IS NULL THEN NULL WHEN {pred} THEN 1.0 ELSE 0.0 END)"
        return "NULL"


def entity_id(values: Sequence[Any]) -> str:
    """The entity id of key values (in the entity type's key order)."""
    return ENTITY_ID_SEPARATOR.join(str(v) for v in values)


def entity_id_sql(key_exprs: Sequence[str]) -> str:
    """The same id in SQL; the caller ensures no key is NULL (``concat_ws`` would skip it)."""
    casts = [f"CAST({e} AS VARCHAR)" for e in key_exprs]
    if len(casts) == 1:
        return casts[0]
    return f"concat_ws({sql_literal(ENTITY_ID_SEPARATOR)}, {', '.join(casts)})"


def in_window(event_time_ms: int, t_ms: int, window_ms: int | None) -> bool:
    """True when a row at ``event_time_ms`` counts for the value at ``t_ms``: (t - window, t]."""
    return event_time_ms <= t_ms and (window_ms is None or event_time_ms > t_ms - window_ms)


def finalize(
    aggregation: Aggregation, n: int, total: float, last_ms: int | None, t_ms: int, ttl_ms: int
) -> float | None:
    """The value from the window's row count ``n``, input sum ``total`` and the time of the
    entity's latest row at or before ``t_ms`` (``last_ms``); see the module doc."""
    if n <= 0 or last_ms is None or last_ms <= t_ms - ttl_ms:
        return None
    return float(n) if aggregation == "count" else total / n


def finalize_sql(
    aggregation: Aggregation, n: str, total: str, last: str, t: str, ttl_ms: int
) -> str:
    """:func:`finalize` in SQL over the given column expressions."""
    undefined = f"{n} IS NULL OR {n} <= 0 OR {last} IS NULL OR {last} <= {t} - {ttl_ms}"
    defined = f"CAST({n} AS DOUBLE)" if aggregation == "count" else f"{total} / {n}"
    return f"(CASE WHEN {undefined} THEN NULL ELSE {defined} END)"


def to_epoch_ms(value: datetime | int) -> int:
    """Epoch milliseconds of a timezone-aware datetime (floored) or an int already in ms.

    Raises ValueError for a naive datetime: its zone would be a guess.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value}: give it tzinfo=UTC")
        return (value - _EPOCH) // _MS
    return int(value)


def from_epoch_ms(ms: int) -> datetime:
    return _EPOCH + ms * _MS


def sql_literal(value: Literal_) -> str:
    """A DuckDB literal: quoted text (quotes doubled), or a finite number."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
