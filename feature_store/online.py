"""The online path: a pure in-memory aggregator of source records, and a thread-safe store over it.

Per (feature, entity) a series keeps the distinct event times of its rows in order, with the row
count and input sum at each time, so the value at any ``t`` the store still answers for is two
binary searches and a slice sum: exactly ``semantics.finalize`` over the rows in
``(t - window, t]``, whatever order the records arrived in.

**Memory bound.** The watermark is the largest event time seen. The store answers for
``as_of >= watermark - history_ms`` only (:class:`AsOfOutOfRangeError` otherwise), so
:meth:`OnlineAggregator.evict` drops every row that no such answer can contain: for a window
``W`` the rows at or before ``watermark - history - W``; for ``all`` it folds them into a
running count and sum. A series whose latest row is ``ttl`` older than that horizon is dropped
whole (every answer would be None). A late record is still exact: one too old to matter is
dropped, or folded for ``all``. Memory is thus about 28 bytes per distinct (entity, event time)
inside the longest window plus ``history_ms``.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from feature_store.declarations import FeatureDeclaration, FeatureSet
from feature_store.errors import AsOfOutOfRangeError
from feature_store.semantics import (
    ENTITY_ID_SEPARATOR,
    EVENT_TIME,
    Condition,
    finalize,
    from_epoch_ms,
    to_epoch_ms,
)

DEFAULT_HISTORY_MS = 3_600_000  # online lookups may go back 1 h behind the watermark


@dataclass(frozen=True)
class FeatureValue:
    """A feature's value (None when undefined) and the number of source rows it aggregates."""

    value: float | None
    count: int


UNDEFINED = FeatureValue(None, 0)


class _Series:
    """The rows of one (feature, entity): distinct times (sorted) with *cumulative* row counts
    and input sums through each time, so any window is two binary searches and a subtraction
    (as offline: ``C(t) - C(t - window)``).

    ``base_n`` / ``base_sum`` are the cumulative totals before the first kept time (rows
    evicted, or folded in late for window "all"); ``C(0)`` is the base.
    """

    __slots__ = ("base_last", "base_n", "base_sum", "cum_n", "cum_sum", "last_ms", "times")

    def __init__(self) -> None:
        self.times: array[int] = array("q")
        self.cum_n: array[int] = array("q")
        self.cum_sum: array[float] = array("d")
        self.base_n = 0
        self.base_sum = 0.0
        self.base_last: int | None = None  # latest time in the base totals
        self.last_ms: int | None = None  # latest row time, kept or not

    def add(self, t: int, x: float) -> None:
        times = self.times
        if not times or t > times[-1]:  # the common case: records arrive in time order
            times.append(t)
            self.cum_n.append((self.cum_n[-1] if self.cum_n else self.base_n) + 1)
            self.cum_sum.append((self.cum_sum[-1] if self.cum_sum else self.base_sum) + x)
        else:
            i = bisect_left(times, t)
            if times[i] != t:
                times.insert(i, t)
                self.cum_n.insert(i, self.cum_n[i - 1] if i else self.base_n)
                self.cum_sum.insert(i, self.cum_sum[i - 1] if i else self.base_sum)
            for j in range(i, len(times)):  # out of order: every later total grows
                self.cum_n[j] += 1
                self.cum_sum[j] += x
        self.last_ms = t if self.last_ms is None else max(self.last_ms, t)

    def fold(self, t: int, x: float) -> None:
        """Count a row before every kept time (a late row of window "all")."""
        self.base_n += 1
        self.base_sum += x
        self.base_last = t if self.base_last is None else max(self.base_last, t)
        for j in range(len(self.times)):
            self.cum_n[j] += 1
            self.cum_sum[j] += x
        self.last_ms = t if self.last_ms is None else max(self.last_ms, t)

    def _through(self, i: int) -> tuple[int, float]:
        """Cumulative (count, sum) of the rows before kept index ``i``."""
        if i == 0:
            return self.base_n, self.base_sum
        return self.cum_n[i - 1], self.cum_sum[i - 1]

    def value(self, feature: FeatureDeclaration, t: int) -> FeatureValue:
        hi = bisect_right(self.times, t)
        n, total = self._through(hi)
        if feature.window_ms is None:
            last = self.times[hi - 1] if hi else self.base_last  # base rows are all <= t
        else:
            n0, total0 = self._through(bisect_right(self.times, t - feature.window_ms))
            n, total = n - n0, total - total0
            last = self.times[hi - 1] if hi else None
        value = finalize(feature.aggregation, n, total, last, t, feature.ttl_ms)
        return FeatureValue(value, n)

    def evict(self, feature: FeatureDeclaration, horizon: int) -> None:
        """Drop the times no answer at ``t >= horizon`` needs: for a window W those at or before
        ``horizon - W``, for "all" those at or before ``horizon`` (kept in the base totals)."""
        edge = horizon if feature.window_ms is None else horizon - feature.window_ms
        cut = bisect_right(self.times, edge)
        if cut:
            self.base_n, self.base_sum = self.cum_n[cut - 1], self.cum_sum[cut - 1]
            newest = self.times[cut - 1]
            self.base_last = newest if self.base_last is None else max(self.base_last, newest)
            del self.times[:cut], self.cum_n[:cut], self.cum_sum[:cut]


class OnlineAggregator:
    """Feature values from source records, in memory; not thread-safe (see OnlineFeatureStore).

    ``add`` takes decoded records (the dicts ``AvroCodec.decode`` returns; ``event_time`` a
    datetime or epoch ms) of a platform source topic.
    """

    def __init__(
        self, features: Iterable[FeatureDeclaration], *, history_ms: int = DEFAULT_HISTORY_MS
    ) -> None:
        if history_ms < 0:
            raise ValueError("history_ms must be >= 0")
        self.features = tuple(features)
        self.history_ms = history_ms
        # source -> where -> features: a filter shared by several features is tested once.
        self._by_source: dict[str, dict[tuple[Condition, ...], list[FeatureDeclaration]]] = {}
        for feature in self.features:
            by_where = self._by_source.setdefault(feature.source, {})
            by_where.setdefault(feature.rule.where, []).append(feature)
        self._series: dict[str, dict[str, _Series]] = {f.qualified_name: {} for f in self.features}
        self.watermark_ms: int | None = None
        self.rows = 0  # rows aggregated (one record can be a row of several features)
        self.late_dropped = 0  # rows too old to change any answer the store gives
        self.erased_dropped = 0  # records skipped: their user was erased after them
        self._erased: dict[str, int] = {}  # user_id -> erased through this event time (ms)

    @property
    def horizon_ms(self) -> int | None:
        """The earliest ``as_of`` answered (None: any, nothing seen yet)."""
        return None if self.watermark_ms is None else self.watermark_ms - self.history_ms

    def add(self, source: str, record: Mapping[str, Any]) -> list[tuple[FeatureDeclaration, str]]:
        """Aggregate one record of ``source``; returns the (feature, entity id) it changed.

        Raises KeyError / ValueError / TypeError for a record without a usable event_time.
        """
        by_where = self._by_source.get(source)
        if not by_where:
            return []
        t_record = to_epoch_ms(record[EVENT_TIME])
        erased_through = self._erased.get(record.get("user_id", ""))
        if erased_through is not None and t_record <= erased_through:
            self.erased_dropped += 1  # a replay of the source topics must not bring them back
            return []
        if self.watermark_ms is None or t_record > self.watermark_ms:
            self.watermark_ms = t_record
        horizon = self.watermark_ms - self.history_ms
        touched = []
        passing = [fs for where, fs in by_where.items() if all(c.holds(record) for c in where)]
        for feature in (f for fs in passing for f in fs):
            row = feature.rule.keyed_input(record)  # == rule.row(record): where already holds
            if row is None:
                continue
            entity, t, x = row
            if feature.window_ms is not None and t <= horizon - feature.window_ms:
                self.late_dropped += 1  # outside every window the store still answers for
                continue
            series = self._series[feature.qualified_name].get(entity)
            if series is None:
                series = self._series[feature.qualified_name][entity] = _Series()
            if feature.window_ms is None and t <= horizon:
                series.fold(t, x)
            else:
                series.add(t, x)
            self.rows += 1
            touched.append((feature, entity))
        return touched

    def value(self, feature: FeatureDeclaration, entity_id: str, as_of_ms: int) -> FeatureValue:
        """The value at ``as_of_ms``; AsOfOutOfRangeError when it is before :attr:`horizon_ms`."""
        horizon = self.horizon_ms
        if horizon is not None and as_of_ms < horizon:
            raise AsOfOutOfRangeError(
                f"as_of {from_epoch_ms(as_of_ms).isoformat()} is older than the online store "
                f"keeps ({from_epoch_ms(horizon).isoformat()}, {self.history_ms} ms behind the "
                "latest event); use feature_store.historical_features for past times, or run the "
                "processor with a longer --history"
            )
        series = self._series[feature.qualified_name].get(entity_id)
        return UNDEFINED if series is None else series.value(feature, as_of_ms)

    def evict(self) -> int:
        """Drop what no answer can need any more (module doc); returns series dropped."""
        horizon = self.horizon_ms
        if horizon is None:
            return 0
        dropped = 0
        for feature in self.features:
            by_entity = self._series[feature.qualified_name]
            stale = [
                e for e, s in by_entity.items()
                if s.last_ms is not None and s.last_ms <= horizon - feature.ttl_ms
            ]  # fmt: skip
            for entity in stale:
                del by_entity[entity]
            dropped += len(stale)
            for series in by_entity.values():
                series.evict(feature, horizon)
        return dropped

    def erase_user(self, user_id: str, through_ms: int) -> list[tuple[FeatureDeclaration, str]]:
        """Forget ``user_id``: drop every series of an entity keyed by that user (``user``,
        ``user_language``, ...) and skip the user's records with event time <= ``through_ms``
        from now on. Returns the (feature, entity id) dropped. Aggregates over many users
        (``model_version``) keep the user's past contribution: it is not the user's data."""
        self._erased[user_id] = max(through_ms, self._erased.get(user_id, through_ms))
        dropped: list[tuple[FeatureDeclaration, str]] = []
        for feature in self.features:
            keys = feature.entity.keys
            if "user_id" not in keys:
                continue
            at = keys.index("user_id")
            by_entity = self._series[feature.qualified_name]
            for entity in [e for e in by_entity if _key_part(e, at, len(keys)) == user_id]:
                del by_entity[entity]
                dropped.append((feature, entity))
        return dropped

    def series_count(self) -> int:
        return sum(len(s) for s in self._series.values())

    def entity_ids(self, feature: FeatureDeclaration) -> list[str]:
        return list(self._series[feature.qualified_name])


def _key_part(entity_id: str, at: int, n_keys: int) -> str | None:
    """The ``at``-th key value of a composite entity id (None if it has another shape)."""
    parts = entity_id.split(ENTITY_ID_SEPARATOR, n_keys - 1)
    return parts[at] if len(parts) == n_keys else None


AsOf = datetime | int | None


class OnlineFeatureStore:
    """Thread-safe online feature values: the processor ingests, lookups read (one lock)."""

    def __init__(self, features: FeatureSet, *, history_ms: int = DEFAULT_HISTORY_MS) -> None:
        self.features = features
        self._aggregator = OnlineAggregator(features, history_ms=history_ms)
        self._lock = threading.Lock()

    @property
    def aggregator(self) -> OnlineAggregator:
        """The aggregator; hold no reference across threads without the store's methods."""
        return self._aggregator

    @property
    def watermark_ms(self) -> int | None:
        return self._aggregator.watermark_ms

    def ingest(
        self, source: str, records: Iterable[Mapping[str, Any]]
    ) -> list[tuple[FeatureDeclaration, str]]:
        """Aggregate records of ``source`` under one lock; returns the (feature, entity) changed."""
        touched: list[tuple[FeatureDeclaration, str]] = []
        with self._lock:
            for record in records:
                touched.extend(self._aggregator.add(source, record))
        return touched

    def evict(self) -> int:
        with self._lock:
            return self._aggregator.evict()

    def erase_user(self, user_id: str, through_ms: int) -> list[tuple[FeatureDeclaration, str]]:
        """:meth:`OnlineAggregator.erase_user` under the store's lock."""
        with self._lock:
            return self._aggregator.erase_user(user_id, through_ms)

    def resolve_as_of(self, as_of: AsOf) -> int | None:
        """``as_of`` in epoch ms; None means the watermark (None before any record)."""
        return self._aggregator.watermark_ms if as_of is None else to_epoch_ms(as_of)

    def get(
        self,
        entity_type: str,
        entity_id: str,
        features: Sequence[str] | None = None,
        as_of: AsOf = None,
    ) -> dict[str, FeatureValue]:
        """Values of one entity by qualified feature name. See :meth:`get_many`."""
        return self.get_many(entity_type, [entity_id], features, as_of)[0]

    def get_many(
        self,
        entity_type: str,
        entity_ids: Sequence[str],
        features: Sequence[str] | None = None,
        as_of: AsOf = None,
    ) -> list[dict[str, FeatureValue]]:
        """Values per entity id (same order), by qualified feature name.

        ``features``: qualified or short names of ``entity_type``'s features (default: all of
        them). ``as_of``: aware datetime or epoch ms; default the watermark (latest event time
        seen). An entity never seen gets undefined values, not an error. Raises
        UnknownEntityError / UnknownFeatureError for undeclared names and AsOfOutOfRangeError
        for an ``as_of`` older than the store keeps.
        """
        chosen = self.features.for_entity(entity_type, features)
        with self._lock:
            t = self.resolve_as_of(as_of)
            if t is None:
                return [{f.qualified_name: UNDEFINED for f in chosen} for _ in entity_ids]
            return [
                {f.qualified_name: self._aggregator.value(f, e, t) for f in chosen}
                for e in entity_ids
            ]

    def lookup_rows(
        self,
        features: Sequence[str],
        entity_ids: Sequence[Sequence[str | None]],
        times: Sequence[int],
    ) -> list[list[FeatureValue]]:
        """Per feature, the values at ``times[i]`` of ``entity_ids[f][i]`` (None id: undefined).

        The row-wise form ``feature_store.lookup`` builds tables from; times in epoch ms.
        """
        chosen = self.features.resolve(features)
        with self._lock:
            return [
                [
                    UNDEFINED if e is None else self._aggregator.value(f, e, t)
                    for e, t in zip(ids, times, strict=True)
                ]
                for f, ids in zip(chosen, entity_ids, strict=True)
            ]
