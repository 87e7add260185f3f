"""The canary: the split of users, its verdict, and the comparison adjusted for which users
landed in which arm (CUPED)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from model_registry.canary import (
    CanaryVerdict,
    canary_bucket,
    canary_decision,
    cuped_adjust,
    user_baselines,
)
from model_registry.errors import CanaryError


def _arms(effect: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Users differ a lot (sd 0.1) and the canary's few users happen to be better ones."""
    rng = np.random.default_rng(seed)
    users_c = rng.normal(0.08, 0.1, 40)  # each user's own mean reward
    users_p = rng.normal(0.00, 0.1, 120)
    idx_c, idx_p = rng.integers(0, 40, 4000), rng.integers(0, 120, 12000)
    y_c = users_c[idx_c] + effect + rng.normal(0, 0.3, 4000)
    y_p = users_p[idx_p] + rng.normal(0, 0.3, 12000)
    # Pre-canary means of the same users under production, measured with some noise.
    x_c = users_c[idx_c] + rng.normal(0, 0.01, 40)[idx_c]
    x_p = users_p[idx_p] + rng.normal(0, 0.01, 120)[idx_p]
    return y_c, y_p, x_c, x_p


def test_raw_arms_confound_the_user_mix_and_cuped_removes_it() -> None:
    y_c, y_p, x_c, x_p = _arms(effect=0.0)
    raw = canary_decision(y_c, y_p, min_requests=100)
    assert raw.verdict is CanaryVerdict.PROMOTE  # wrongly: its users were just better
    a_c, a_p = cuped_adjust([(y_c, x_c), (y_p, x_p)])
    fair = canary_decision(a_c, a_p, min_requests=100, max_requests=None)
    assert fair.verdict is CanaryVerdict.CONTINUE  # no real difference: no decision
    assert abs(fair.canary_reward_per_request - fair.production_reward_per_request) < 0.01


def test_cuped_keeps_a_real_effect() -> None:
    y_c, y_p, x_c, x_p = _arms(effect=-0.05, seed=1)
    a_c, a_p = cuped_adjust([(y_c, x_c), (y_p, x_p)])
    verdict = canary_decision(a_c, a_p, min_requests=100)
    assert verdict.verdict is CanaryVerdict.ROLLBACK
    assert verdict.canary_reward_per_request - verdict.production_reward_per_request < -0.03


def test_flat_covariate_leaves_the_outcomes_alone() -> None:
    y = np.array([1.0, 2.0, 3.0])
    [same] = cuped_adjust([(y, np.ones(3))])
    assert np.array_equal(same, y)


def test_user_baselines_average_one_versions_suggestion_rewards(tmp_path: Path) -> None:
    table = pa.table({
        "source": ["SUGGESTION"] * 5 + ["ROLLOUT"],
        "model_name": ["m"] * 5 + ["m"],
        "model_version": [0, 0, 0, 1, 0, 0],
        "reward_fn": ["tab@1"] * 6,
        "user_id": ["a", "a", "b", "a", None, "b"],
        "reward": [0.75, -0.25, 0.75, 9.0, 9.0, 9.0],
    })  # fmt: skip
    pq.write_table(table, tmp_path / "r.parquet")
    assert user_baselines([tmp_path / "r.parquet"], "m", 0, "tab@1") == {"a": 0.25, "b": 0.75}
    assert user_baselines([], "m", 0, "tab@1") == {}


def test_user_clusters_widen_the_bounds_when_users_differ() -> None:
    """Few users, each with a steady reward: requests are not independent evidence."""
    rng = np.random.default_rng(3)
    users_c, users_p = rng.normal(0.05, 0.2, 10), rng.normal(0.0, 0.2, 10)
    idx_c, idx_p = rng.integers(0, 10, 3000), rng.integers(0, 10, 3000)
    y_c = users_c[idx_c] + rng.normal(0, 0.05, 3000)
    y_p = users_p[idx_p] + rng.normal(0, 0.05, 3000)
    naive = canary_decision(y_c, y_p, min_requests=100)
    clustered = canary_decision(
        y_c, y_p, min_requests=100,
        canary_clusters=[f"c{i}" for i in idx_c],
        production_clusters=[f"p{i}" for i in idx_p],
    )  # fmt: skip
    naive_width = naive.difference_upper - naive.difference_lower
    clustered_width = clustered.difference_upper - clustered.difference_lower
    assert clustered_width > 3 * naive_width
    assert clustered.verdict is CanaryVerdict.CONTINUE  # 10 users per arm prove nothing


def test_one_tasks_trials_are_one_cluster() -> None:
    """The agent's canary: 8 trials per task agree with each other, and tasks differ far more
    than versions do; 18 hard tasks on the canary's side are not evidence of a worse model."""
    per_task_c = np.repeat([0.0] * 16 + [0.3] * 2, 8)  # 18 tasks, mostly unsolved
    per_task_p = np.repeat(([0.0] * 5 + [0.3] * 2) * 10, 8)[: 8 * 70]  # 70 tasks
    groups_c = [f"c{i // 8}" for i in range(len(per_task_c))]
    groups_p = [f"p{i // 8}" for i in range(len(per_task_p))]
    naive = canary_decision(per_task_c, per_task_p, min_requests=96, tolerance=0.03)
    clustered = canary_decision(
        per_task_c, per_task_p, min_requests=96, tolerance=0.03,
        canary_clusters=groups_c, production_clusters=groups_p,
    )  # fmt: skip
    assert naive.verdict is CanaryVerdict.ROLLBACK
    assert clustered.verdict is CanaryVerdict.CONTINUE


def test_canary_decisions() -> None:
    rng = np.random.default_rng(0)
    production = rng.choice([0.75, -0.25, 0.0], p=[0.25, 0.7, 0.05], size=20_000)
    better = rng.choice([0.75, -0.25, 0.0], p=[0.22, 0.28, 0.5], size=20_000)
    worse = rng.choice([0.75, -0.25, 0.0], p=[0.1, 0.85, 0.05], size=20_000)
    decide = canary_decision
    assert decide(better[:50], production, min_requests=100).verdict is CanaryVerdict.CONTINUE
    assert decide(better, production, min_requests=100).verdict is CanaryVerdict.PROMOTE
    rolled = decide(worse, production, min_requests=100)
    assert rolled.verdict is CanaryVerdict.ROLLBACK and rolled.difference_upper < 0
    same = production[:300]
    assert decide(same, production, min_requests=100).verdict is CanaryVerdict.CONTINUE
    final = decide(same, production, min_requests=100, max_requests=300)
    assert final.verdict in (CanaryVerdict.PROMOTE, CanaryVerdict.ROLLBACK)
    with pytest.raises(CanaryError):
        decide(better, production, min_requests=100, confidence=0.2)


def test_canary_bucket_is_stable_uniform_and_per_model() -> None:
    users = [f"user-{i}" for i in range(20_000)]
    buckets = [canary_bucket("gate", u) for u in users]
    assert buckets == [canary_bucket("gate", u) for u in users]
    assert all(0.0 <= b < 1.0 for b in buckets)
    for fraction in (0.05, 0.1, 0.5):
        share = sum(b < fraction for b in buckets) / len(buckets)
        assert abs(share - fraction) < 0.01
    other = [canary_bucket("other-model", u) for u in users[:100]]
    assert other != buckets[:100]
    # A larger canary keeps the users a smaller one had.
    small = {u for u, b in zip(users, buckets, strict=True) if b < 0.1}
    large = {u for u, b in zip(users, buckets, strict=True) if b < 0.2}
    assert small < large
