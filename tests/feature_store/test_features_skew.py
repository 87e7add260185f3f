"""Online and offline agree: the same random rewards, aggregated in memory and by DuckDB over a
real Parquet lake, give the same value at sampled (entity, time), ties and boundaries included."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from feature_store.declarations import FeatureDeclaration, FeatureSet, load_features, parse_features
from feature_store.offline import historical_features
from feature_store.online import FeatureValue, OnlineAggregator, OnlineFeatureStore
from feature_store.semantics import finalize, in_window
from feature_store.tables import count_column, online_features
from tests.feature_store.feature_events import (
    HOUR_MS,
    MINUTE_MS,
    T0_MS,
    random_rewards,
    reward,
    write_lake,
)

EXTRA = [
    {
        "name": "reward_mean_all", "entity": "user", "source": "rewards", "aggregation": "mean",
        "where": [["source", "==", "SUGGESTION"]], "value": "reward", "window": "all",
        "ttl": "2h",
    },
    {
        "name": "shown_10m", "entity": "repo", "source": "rewards", "aggregation": "count",
        "where": [["decision", "==", "SHOWN"], ["model_version", ">=", 2]], "window": "10m",
    },
    {
        "name": "accept_rate_all", "entity": "user_language", "source": "rewards",
        "aggregation": "rate", "where": [["reward_fn", "!=", "survival@1"]],
        "predicate": ["reward_components.accepted", ">=", 1], "window": "all", "ttl": "30d",
    },
]  # fmt: skip


def feature_set() -> FeatureSet:
    return FeatureSet([*load_features(), *parse_features(EXTRA)])


class Reference:
    """The definition in semantics.py applied row by row: what both paths must equal."""

    def __init__(self, features: FeatureSet, records: list[dict[str, Any]]) -> None:
        self._rows: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for feature in features:
            for row in map(feature.rule.row, records):
                if row is not None:
                    self._rows.setdefault((feature.qualified_name, row[0]), []).append(row[1:])

    def value(self, feature: FeatureDeclaration, entity: str, t: int) -> FeatureValue:
        rows = self._rows.get((feature.qualified_name, entity), [])
        inside = [x for et, x in rows if in_window(et, t, feature.window_ms)]
        last = max((et for et, _ in rows if et <= t), default=None)
        value = finalize(feature.aggregation, len(inside), sum(inside), last, t, feature.ttl_ms)
        return FeatureValue(value, len(inside))


def sample_rows(rng: random.Random, records: list[dict[str, Any]], n: int) -> pa.Table:
    """Entity rows at event times, just before/after them and at window boundaries."""
    times = [int(r["event_time"]) for r in records]
    rows = []
    for _ in range(n):
        base = rng.choice(times)
        t = base + rng.choice([0, 0, -1, 1, 10 * MINUTE_MS, HOUR_MS, 24 * HOUR_MS, -HOUR_MS])
        rows.append(
            {
                "user_id": rng.choice(["user:a", "user:b", "user:c", "user:d", None]),
                "repo_id": rng.choice(["repo:x", "repo:y"]),
                "language": rng.choice(["python", "go"]),
                "model_name": "suggestion-gate",
                "model_version": rng.choice([1, 2]),
                "event_time": t,
            }
        )
    return pa.Table.from_pylist(rows)


def assert_same(a: FeatureValue, b: FeatureValue, what: str) -> None:
    assert a.count == b.count, what
    if a.value is None or b.value is None:
        assert a.value is None and b.value is None, what
    else:
        assert math.isclose(a.value, b.value, rel_tol=1e-9, abs_tol=1e-9), what


@pytest.mark.parametrize("seed", [1, 2])
def test_online_and_offline_agree_with_the_definition(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    records = random_rewards(rng, 1500, span_ms=30 * HOUR_MS, step_ms=5 * MINUTE_MS)
    write_lake(tmp_path, records)
    features = feature_set()
    online = OnlineFeatureStore(features, history_ms=10**12)  # keep all: query any time
    shuffled = records[:]
    rng.shuffle(shuffled)  # arrival order must not matter
    online.ingest("rewards", shuffled)

    rows = sample_rows(rng, records, 300)
    names = list(features.names)
    offline = historical_features(rows, names, tmp_path, feature_set=features)
    live = online_features(online, rows, names)
    truth = Reference(features, records)
    checked = defined = 0
    for i in range(rows.num_rows):
        t = rows.column("event_time")[i].as_py()
        for name in names:
            feature = features.get(name)
            keys = [rows.column(k)[i].as_py() for k in feature.entity.keys]
            off = FeatureValue(
                offline.column(name)[i].as_py(), offline.column(count_column(name))[i].as_py()
            )
            on = FeatureValue(
                live.column(name)[i].as_py(), live.column(count_column(name))[i].as_py()
            )
            what = f"{name} {keys} at {t}"
            assert_same(on, off, what)
            if None not in keys:
                entity = "@".join(str(k) for k in keys)
                assert_same(on, truth.value(feature, entity, t), what)
            checked += 1
            defined += off.value is not None
    assert defined > checked // 3  # the sample hits real values, not only empty windows


def test_eviction_keeps_answers_exact_within_history(tmp_path: Path) -> None:
    rng = random.Random(7)
    records = sorted(
        random_rewards(rng, 1200, span_ms=40 * HOUR_MS, step_ms=MINUTE_MS),
        key=lambda r: r["event_time"],
    )
    write_lake(tmp_path, records)
    features = feature_set()
    aggregator = OnlineAggregator(features, history_ms=HOUR_MS)
    for index, record in enumerate(records):
        aggregator.add("rewards", record)
        if index % 50 == 0:
            aggregator.evict()
    aggregator.evict()
    assert aggregator.watermark_ms is not None
    horizon = aggregator.watermark_ms - HOUR_MS
    times = [horizon, horizon + 1, aggregator.watermark_ms, aggregator.watermark_ms + HOUR_MS]
    rows = pa.Table.from_pylist(
        [
            {"user_id": u, "repo_id": "repo:y", "language": "go", "model_name": "suggestion-gate",
             "model_version": 2, "event_time": t}
            for u in ["user:a", "user:b", "user:c"] for t in times
        ]
    )  # fmt: skip
    offline = historical_features(rows, list(features.names), tmp_path, feature_set=features)
    for i in range(rows.num_rows):
        t = rows.column("event_time")[i].as_py()
        for feature in features:
            keys = [str(rows.column(k)[i].as_py()) for k in feature.entity.keys]
            on = aggregator.value(feature, "@".join(keys), t)
            off = FeatureValue(
                offline.column(feature.qualified_name)[i].as_py(),
                offline.column(count_column(feature.qualified_name))[i].as_py(),
            )
            assert_same(on, off, f"{feature.qualified_name} {keys} at {t}")
    assert aggregator.series_count() < 60  # bounded by the history, not the 40 h of input


def test_a_planted_future_event_never_leaks_into_an_offline_row(tmp_path: Path) -> None:
    t = T0_MS + 5 * HOUR_MS
    past = [reward(t - k * MINUTE_MS, user="user:p", shown=True, accepted=False) for k in range(5)]
    future = reward(t + 1, user="user:p", shown=True, accepted=True, value=1000.0)
    write_lake(tmp_path, [*past, future])
    rows = pa.table({"user_id": ["user:p", "user:p"], "event_time": [t, t + 1]})
    names = ["user.reward_mean_24h", "user.accept_rate_24h", "user.requests_24h"]
    out = historical_features(rows, names, tmp_path).to_pylist()
    assert out[0]["user.reward_mean_24h"] == -0.25
    assert out[0]["user.accept_rate_24h"] == 0.0
    assert out[0]["user.requests_24h"] == 5.0
    assert out[1]["user.requests_24h"] == 6.0  # at its own time, the event is in
    assert out[1]["user.accept_rate_24h"] == pytest.approx(1 / 6)


def test_timestamps_and_missing_lake_topic(tmp_path: Path) -> None:
    t = T0_MS + HOUR_MS
    write_lake(tmp_path, [reward(t, user="user:q")])
    stamps = pa.array([t, t - 1], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    rows = pa.table(
        {"user_id": ["user:q", "user:q"], "event_time": stamps.cast(pa.timestamp("us", tz="UTC"))}
    )
    out = historical_features(rows, ["user.requests_24h"], tmp_path).to_pylist()
    assert [r["user.requests_24h"] for r in out] == [1.0, None]
    empty = historical_features(rows, ["user.requests_24h"], tmp_path / "nothing").to_pylist()
    assert [r["user.requests_24h__count"] for r in empty] == [0, 0]
