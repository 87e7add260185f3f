"""The online aggregator: window bounds, ties, TTL, eviction, late records, lookups, matrix."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from feature_store.declarations import load_features, parse_features
from feature_store.errors import AsOfOutOfRangeError, EntityRowsError, UnknownFeatureError
from feature_store.online import FeatureValue, OnlineAggregator, OnlineFeatureStore
from feature_store.tables import feature_matrix, matrix_columns, online_features
from tests.feature_store.feature_events import HOUR_MS, MINUTE_MS, T0_MS, reward

ACCEPT = "user.accept_rate_24h"


def store_with(*records: dict[str, object], history_ms: int = 10**12) -> OnlineFeatureStore:
    store = OnlineFeatureStore(load_features(), history_ms=history_ms)
    store.ingest("rewards", records)
    return store


def test_window_is_open_at_the_start_and_closed_at_t_with_ties() -> None:
    t = T0_MS + 30 * HOUR_MS
    store = store_with(
        reward(t - 24 * HOUR_MS, accepted=True),  # exactly t - window: out at t
        reward(t, accepted=True),
        reward(t, accepted=False),  # a tie at t: both in
        reward(t + 1, accepted=True),  # after t: out
    )
    assert store.get("user", "user:a", [ACCEPT], t)[ACCEPT] == FeatureValue(0.5, 2)
    before = store.get("user", "user:a", [ACCEPT], t - 1)[ACCEPT]
    assert before == FeatureValue(1.0, 1)  # only the row at t - 24h, 1 ms inside its window
    assert store.get("user", "user:a", [ACCEPT], t - 24 * HOUR_MS - 1)[ACCEPT].value is None


def test_filters_and_null_inputs_follow_sql_semantics() -> None:
    t = T0_MS
    store = store_with(
        reward(t, shown=False),  # filtered out of accept rate (not shown), in show rate
        reward(t, reward_fn="survival@1", accepted=True),  # other reward fn: filtered out
        reward(t, reward_fn="tests@1"),  # no accepted component: not a row
        reward(t, shown=None),  # null decision: not shown, and null show predicate
        reward(t, user=None),  # no entity
        reward(t, accepted=True),
    )
    got = store.get("user", "user:a", ["accept_rate_24h", "show_rate_24h", "requests_24h"], t)
    assert got[ACCEPT] == FeatureValue(1.0, 1)
    assert got["user.show_rate_24h"] == FeatureValue(0.5, 2)  # the null-decision row is no row
    assert got["user.requests_24h"] == FeatureValue(3.0, 3)
    assert store.get("user", "user:never", as_of=t)[ACCEPT] == FeatureValue(None, 0)


def test_all_window_with_ttl_and_eviction_folds_exactly() -> None:
    (feature,) = parse_features(
        [{"name": "mean_all", "entity": "user", "source": "rewards", "aggregation": "mean",
          "value": "reward", "window": "all", "ttl": "2h"}]
    )  # fmt: skip
    agg = OnlineAggregator([feature], history_ms=HOUR_MS)
    for k in range(10):
        agg.add("rewards", reward(T0_MS + k * 10 * MINUTE_MS, accepted=k % 2 == 0))
    agg.evict()
    now = T0_MS + 90 * MINUTE_MS
    assert agg.value(feature, "user:a", now) == FeatureValue(0.25, 10)
    agg.add("rewards", reward(T0_MS - HOUR_MS, accepted=True))  # late, folded into the total
    assert agg.value(feature, "user:a", now).count == 11
    with pytest.raises(AsOfOutOfRangeError, match="historical_features"):
        agg.value(feature, "user:a", now - 2 * HOUR_MS)
    later = now + 3 * HOUR_MS  # after the TTL: undefined, then evicted
    agg.add("rewards", reward(later, user="user:b"))
    assert agg.value(feature, "user:a", later).value is None
    agg.evict()
    assert agg.entity_ids(feature) == ["user:b"]


def test_windowed_series_drop_old_rows_and_late_ones() -> None:
    store = store_with(history_ms=HOUR_MS)
    for k in range(48):
        store.ingest("rewards", [reward(T0_MS + k * HOUR_MS, accepted=True)])
        store.evict()
    store.ingest("rewards", [reward(T0_MS, accepted=False)])  # 47 h late: cannot matter
    assert store.aggregator.late_dropped >= 1
    assert store.get("user", "user:a", [ACCEPT])[ACCEPT] == FeatureValue(1.0, 24)


def test_lookup_table_and_matrix() -> None:
    t = T0_MS
    store = store_with(reward(t, accepted=True), reward(t, user="user:b", shown=False))
    rows = pa.table({"user_id": ["user:a", "user:b", None], "language": ["python"] * 3})
    names = [ACCEPT, "user_language.accept_rate_24h", "user.requests_24h"]
    table = online_features(store, rows, names)
    matrix = feature_matrix(table, names)
    assert matrix.dtype == np.float32 and matrix.shape == (3, 6)
    assert matrix_columns(names)[3] == f"log1p({ACCEPT}__count)"
    assert matrix[0].tolist() == pytest.approx([1, 1, 1, math.log(2), math.log(2), math.log(2)])
    assert matrix[1, :3].tolist() == [0.0, 0.0, 1.0]  # undefined -> 0, with count 0
    assert matrix[2].tolist() == [0.0] * 6
    with pytest.raises(EntityRowsError, match="lack repo_id"):
        online_features(store, rows, ["repo.requests_24h"])
    with pytest.raises(UnknownFeatureError):
        online_features(store, rows, ["user.nope"])


def test_all_window_ttl_sees_the_latest_folded_time() -> None:
    (feature,) = parse_features(
        [{"name": "n_all", "entity": "user", "source": "rewards", "aggregation": "count",
          "window": "all", "ttl": "30m"}]
    )  # fmt: skip
    agg = OnlineAggregator([feature], history_ms=HOUR_MS)
    for minutes in (0, 10, 100):
        agg.add("rewards", reward(T0_MS + minutes * MINUTE_MS))
    agg.evict()  # horizon T0+40m: the rows at 0 and 10 min are folded
    assert agg.value(feature, "user:a", T0_MS + 45 * MINUTE_MS) == FeatureValue(None, 2)
    assert agg.value(feature, "user:a", T0_MS + 100 * MINUTE_MS) == FeatureValue(3.0, 3)
