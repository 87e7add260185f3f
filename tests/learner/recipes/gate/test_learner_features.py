"""Feature-store features as policy inputs: offline point in time, online at serving, config."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from feature_store import OnlineFeatureStore, load_features
from learner.errors import LearnerError
from learner.recipes.gate.config import DEFAULT_CONFIG_PATH, LearnerConfig
from learner.recipes.gate.features import (
    OnlineFeatureProvider,
    feature_columns,
    point_in_time_enrich,
)
from learner.recipes.gate.reward_rows import load_rows
from learner.recipes.gate.samples import RewardRows
from learner.recipes.gate.windows import build_window
from policies.errors import PolicyError
from policies.gate_net import GateNetConfig, GatePolicyNet, ServingPolicy, load_policy, save_policy
from policies.policy import RequestBatch
from schemas.enums import SuggestionTrigger
from tests.learner.recipes.gate.gate_offline import write_reward_lake

FN = "tab@1"
NAMES = ("user.accept_rate_24h", "user_language.accept_rate_24h")
T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
USERS = ("u1", "u2", "u3")
LANGS = ("python", "go")


def _rows(n: int, seed: int, t0: int = T0) -> tuple[RewardRows, list[str], list[str]]:
    rng = np.random.default_rng(seed)
    shown = rng.random(n) < 0.8
    accepted = shown & (rng.random(n) < 0.5)
    rows = RewardRows(
        source_id=np.array([f"s{seed}-{i}" for i in range(n)], dtype=object),
        context=rng.normal(size=(n, 10)).astype(np.float32),
        shown=shown,
        propensity=np.full(n, 0.5),
        reward=np.where(shown, np.where(accepted, 0.75, -0.25), 0.0),
        model_version=np.zeros(n, dtype=np.int64),
        event_time_ms=t0 + np.arange(n, dtype=np.int64) * 60_000,  # one a minute
    )
    users = [USERS[i] for i in rng.integers(0, len(USERS), n)]
    langs = [LANGS[i] for i in rng.integers(0, len(LANGS), n)]
    return rows, users, langs


def _records(rows: RewardRows, users: list[str], langs: list[str]) -> list[dict[str, object]]:
    """The Reward records the online processor would decode for ``rows``."""
    return [
        {
            "event_time": int(rows.event_time_ms[i]),
            "source": "SUGGESTION",
            "reward_fn": FN,
            "decision": "SHOWN" if rows.shown[i] else "SUPPRESSED",
            "reward_components": {"accepted": float(rows.shown[i] and rows.reward[i] > 0)},
            "reward": float(rows.reward[i]),
            "user_id": users[i],
            "language": langs[i],
            "model_name": "suggestion-gate",
            "model_version": 0,
            "repo_id": None,
        }
        for i in range(len(rows))
    ]


def test_enrich_adds_point_in_time_columns_that_a_later_reward_cannot_change(
    tmp_path: Path,
) -> None:
    lake = tmp_path / "lake"
    rows, users, langs = _rows(120, 0)
    write_reward_lake(lake, rows, user_ids=users, languages=langs)
    enrich = point_in_time_enrich(NAMES, lake)
    before = load_rows(lake, list((lake / "rewards").rglob("*.parquet")), reward_fn=FN,
                       holdout=None, enrich=enrich)  # fmt: skip
    assert before.extra_columns == feature_columns(NAMES)
    assert before.extra is not None and before.extra.shape == (120, 4)
    assert before.extra[0, 2] == 0.0  # the first row sees no earlier reward: count 0
    # Row i's user accept rate is exactly the rate over its user's earlier shown rows.
    i = 100
    earlier = [j for j in range(i) if users[j] == users[i] and rows.shown[j]]
    expected = np.mean([rows.reward[j] > 0 for j in earlier])
    assert before.extra[i, 0] == pytest.approx(expected)
    assert before.extra[i, 2] == pytest.approx(np.log1p(len(earlier)))
    # A reward at the same time as row 50 and later ones (planted) change nothing before them.
    planted = RewardRows.concat([rows.take(np.arange(50, 120))])
    planted = RewardRows(**{**planted.__dict__, "source_id": planted.source_id + "-x",
                            "reward": np.full(70, 0.75), "shown": np.ones(70, bool)})  # fmt: skip
    write_reward_lake(lake, planted, first_offset=1000, user_ids=users[50:], languages=langs[50:])
    files = sorted((lake / "rewards").rglob("*.parquet"))
    after = load_rows(lake, files, reward_fn=FN, holdout=None, enrich=enrich)
    assert before.extra is not None and after.extra is not None
    np.testing.assert_array_equal(after.extra[:51], before.extra[:51])
    assert not np.array_equal(after.extra[51:120], before.extra[51:120])


def test_build_window_records_the_feature_columns(tmp_path: Path) -> None:
    lake, mds = tmp_path / "lake", tmp_path / "mds"
    rows, users, langs = _rows(200, 1)
    write_reward_lake(lake, rows, user_ids=users, languages=langs)
    record = build_window(lake, mds, "gate", FN, enrich=point_in_time_enrich(NAMES, lake))
    assert record is not None and record.extra_columns == feature_columns(NAMES)


def test_online_provider_matches_offline_values_at_the_same_time(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    rows, users, langs = _rows(300, 2)
    write_reward_lake(lake, rows, user_ids=users, languages=langs)
    store = OnlineFeatureStore(load_features(), history_ms=10**10)
    store.ingest("rewards", _records(rows, users, langs))
    provider = OnlineFeatureProvider(store, NAMES, pseudonymize=lambda raw: raw[len("raw-") :])
    batch = RequestBatch(
        contexts=np.zeros((6, 10), np.float32),
        languages=("python", "go") * 3,
        ides=("vscode",) * 6,
        triggers=(SuggestionTrigger.AUTOMATIC,) * 6,
        user_ids=tuple(f"raw-{u}" for u in ("u1", "u1", "u2", "u2", "u3", "nobody")),
    )
    online = provider(batch)
    # Offline at the store's watermark (+1 ms: enrich reads at t - 1 ms).
    table = pa.table({
        "user_id": [u[len("raw-"):] for u in batch.user_ids],
        "language": list(batch.languages),
        "event_time": pa.array([int(rows.event_time_ms[-1]) + 1] * 6, pa.int64()),
        "context": pa.array([[0.0] * 10] * 6, pa.list_(pa.float32())),
    })  # fmt: skip
    offline = point_in_time_enrich(NAMES, lake)(table)
    expected = np.stack([offline.column(c).to_numpy() for c in feature_columns(NAMES)], axis=1)
    np.testing.assert_allclose(online, expected, rtol=1e-6)
    assert online[5].tolist() == [0.0] * 4  # an unknown user: undefined, count 0


def _batch(n: int, users: tuple[str, ...] = ()) -> RequestBatch:
    return RequestBatch(
        contexts=np.random.default_rng(0).normal(size=(n, 10)).astype(np.float32),
        languages=("python",) * n,
        ides=("vscode",) * n,
        triggers=(SuggestionTrigger.AUTOMATIC,) * n,
        user_ids=users,
    )


def test_serving_policy_with_a_feature_provider(tmp_path: Path) -> None:
    config = GateNetConfig(extra_columns=feature_columns(NAMES))
    net = GatePolicyNet(config)
    torch_w = net.linear.weight
    torch_w.data[0, 10] = 3.0  # P(show) grows with the user's accept rate
    save_policy(net, tmp_path / "p")
    with pytest.raises(PolicyError, match="feature provider"):
        load_policy(tmp_path / "p", "g", 1)
    with pytest.raises(PolicyError, match="feature provider"):
        ServingPolicy(net, "g", 1).show_probabilities(_batch(2))
    store = OnlineFeatureStore(load_features())
    rows, users, langs = _rows(200, 3)
    store.ingest("rewards", _records(rows, users, langs))
    provider = OnlineFeatureProvider(store, NAMES)
    policy = load_policy(tmp_path / "p", "g", 1, features=provider)
    batch = _batch(3, ("u1", "u2", "u3"))
    features = np.concatenate([batch.contexts, provider(batch)], axis=1)
    np.testing.assert_allclose(policy.show_probabilities(batch), policy.probabilities(features))
    with pytest.raises(PolicyError, match="same features"):
        ServingPolicy(net, "g", 1, features=OnlineFeatureProvider(store, NAMES[:1]))


def test_config_features_are_validated() -> None:
    assert LearnerConfig().features == ()
    config = LearnerConfig(features=list(NAMES))  # type: ignore[arg-type]  # YAML gives lists
    assert config.features == NAMES
    with pytest.raises(LearnerError, match=r"unknown feature 'user\.nope'"):
        LearnerConfig(features=("user.nope",))
    with pytest.raises(LearnerError, match="entity a serving request"):
        LearnerConfig(features=("repo.requests_24h",))
    shipped = DEFAULT_CONFIG_PATH.with_name("with-features.yaml")
    assert LearnerConfig.load(shipped).features == NAMES
