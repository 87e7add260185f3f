"""The canary's online evidence: realised rewards of canary and production from `rewards`.

A monitor starts reading every partition of the rewards topic at its end when the canary
starts, so it only counts rewards attributed while both versions serve, and keeps the per-request
rewards of the two versions (suggestion rewards of one reward function and model).

Users are split between the arms by a stable hash, so the arms hold *different users*; with
heavy-tailed activity a handful of users dominates each arm, and a raw comparison of the arms'
means mostly measures who landed where. The comparison is therefore CUPED-adjusted: each reward
minus theta times its user's pre-canary mean reward under production (from the lake), with theta
the within-arm regression coefficient (ANCOVA). The adjustment has mean zero across users, so
it removes the user mix from the difference without biasing it.

The verdict is here too, beside its evidence: :func:`canary_decision` compares realised reward per
request of canary and production traffic (one-sided normal test of the difference of means;
rewards are bounded, so the CLT applies at the sizes a canary sees): significantly worse →
ROLLBACK, not worse at ``confidence`` → PROMOTE, otherwise CONTINUE until ``max_requests``, where
the point estimate decides. :class:`CanaryConfig` holds its settings (a recipe's ``canary:``
section), :func:`canary_bucket` the split of users between the arms (the fleet routes by it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from model_registry.errors import CanaryError
from streams.errors import DecodeError
from streams.serde import AvroCodec
from streams.topics import REWARDS_TOPIC

_BUCKETS = float(1 << 64)
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class CanaryConfig:
    """Canary rollout: share of users, and when the online comparison decides."""

    traffic_fraction: float = 0.25
    min_requests: int = 1500  # per arm, before a decision
    max_requests: int = 4000  # canary requests; then the point estimate decides
    confidence: float = DEFAULT_CONFIDENCE
    tolerance: float = 0.005  # non-inferiority margin (reward per request)
    timeout_s: float = 300.0  # no decision by then → roll back (the canary is not shown better)


def canary_bucket(model_name: str, user_id: str) -> float:
    """A stable position in [0, 1) of ``user_id`` for ``model_name``: the same on every replica
    and every run (blake2b, not Python's salted ``hash``). Users below the canary's
    ``traffic_fraction`` are routed to the canary, so a larger fraction keeps the same users."""
    digest = hashlib.blake2b(f"{model_name}:{user_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _BUCKETS


class CanaryMonitor:
    """Collects rewards of ``canary_version`` and ``production_version`` of ``model_name``
    (``source`` Rewards: SUGGESTION per request, ROLLOUT per agent trial), each with its
    cluster: the Reward field ``cluster_by`` whose equal values are correlated evidence — the
    user for requests (arms are split by user), the group for trials (one task's trials)."""

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        codec: AvroCodec,
        model_name: str,
        reward_fn: str,
        canary_version: int,
        production_version: int,
        *,
        topic: str = REWARDS_TOPIC,
        source: str = "SUGGESTION",
        cluster_by: str = "user_id",
    ) -> None:
        self._codec, self._topic, self._source = codec, topic, source
        self._model, self._fn, self._cluster_by = model_name, reward_fn, cluster_by
        # version → [(user_id, cluster key, reward)] per request
        self._arms: dict[int, list[tuple[str | None, str | None, float]]] = {
            canary_version: [],
            production_version: [],
        }
        self.canary_version, self.production_version = canary_version, production_version
        self._consumer = Consumer(
            {**kafka_config, "group.id": "_flywheel.canary", "enable.auto.commit": False}
        )
        partitions = self._consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self._consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in partitions])

    def poll(self, timeout_s: float = 1.0, max_messages: int = 5000) -> int:
        """Read what arrived (up to ``max_messages``); returns how many rewards counted."""
        counted = 0
        for msg in self._consumer.consume(max_messages, timeout_s):
            value = msg.value()
            if msg.error() or value is None:
                continue
            try:
                r = self._codec.decode(REWARDS_TOPIC, value)  # the schema of any copy of it
            except DecodeError:
                continue  # the sink dead-letters it; the canary just does not count it
            arm = self._arms.get(r["model_version"])
            if (
                arm is not None
                and r["model_name"] == self._model
                and r["reward_fn"] == self._fn
                and r["source"] == self._source
            ):
                arm.append((r.get("user_id"), r.get(self._cluster_by), float(r["reward"])))
                counted += 1
        return counted

    def clusters(self) -> tuple[list[str | None], list[str | None]]:
        """The cluster key of each request of the canary arm and the production arm."""
        return (
            [c for _, c, _ in self._arms[self.canary_version]],
            [c for _, c, _ in self._arms[self.production_version]],
        )

    def rewards(self, baseline: Mapping[str, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(canary rewards, production rewards), one value per request; CUPED-adjusted by the
        users' pre-canary mean rewards when ``baseline`` (user_id → mean) is given."""
        arms = [self._arms[self.canary_version], self._arms[self.production_version]]
        ys = [np.array([r for _, _, r in arm], dtype=np.float64) for arm in arms]
        if not baseline:
            return ys[0], ys[1]
        prior = float(np.mean(list(baseline.values())))
        xs = [np.array([baseline.get(u or "", prior) for u, _, _ in arm]) for arm in arms]
        canary, production = cuped_adjust(list(zip(ys, xs, strict=True)))
        return canary, production

    def close(self) -> None:
        self._consumer.close()


def cuped_adjust(
    arms: Sequence[tuple[np.ndarray, np.ndarray]],
) -> list[np.ndarray]:
    """Each arm's ``y - theta (x - mean x)``; ``arms`` holds (y, x) per arm.

    ``y``: per-request outcomes; ``x``: the same request's user's pre-period covariate.
    ``theta`` is the *within-arm* regression coefficient (ANCOVA): estimated across arms it
    would absorb part of the treatment effect whenever x is imbalanced between the arms. With
    no usable x variation the outcomes come back unchanged.
    """
    sxy = sxx = 0.0
    for y, x in arms:
        if len(y) >= 2:
            sxy += float(np.sum((x - x.mean()) * (y - y.mean())))
            sxx += float(np.sum((x - x.mean()) ** 2))
    if sxx == 0.0:
        return [y for y, _ in arms]
    theta = sxy / sxx
    centre = float(np.concatenate([x for _, x in arms]).mean())
    return [y - theta * (x - centre) for y, x in arms]


def user_baselines(
    files: Sequence[Path], model_name: str, version: int, reward_fn: str
) -> dict[str, float]:
    """Mean suggestion reward per user (pseudonym) under ``version`` in the lake ``files``."""
    import duckdb  # here: the serving fleet imports this module for canary_bucket only

    if not files:
        return {}
    with duckdb.connect() as con:
        rows = con.execute(
            "select user_id, avg(reward) from read_parquet($files, union_by_name = true) "
            "where source = 'SUGGESTION' and model_name = $model and model_version = $version "
            "and reward_fn = $fn and user_id is not null group by user_id",
            {
                "files": [str(f) for f in files],
                "model": model_name,
                "version": version,
                "fn": reward_fn,
            },
        ).fetchall()
    return {str(user): float(mean) for user, mean in rows}


class CanaryVerdict(StrEnum):
    """What to do with a canary."""

    PROMOTE = "PROMOTE"
    ROLLBACK = "ROLLBACK"
    CONTINUE = "CONTINUE"


@dataclass(frozen=True)
class CanaryDecision:
    """The canary's verdict with realised reward per request of both arms."""

    verdict: CanaryVerdict
    reason: str
    canary_requests: int
    production_requests: int
    canary_reward_per_request: float
    production_reward_per_request: float
    difference_lower: float  # one-sided bounds on canary - production at ``confidence``
    difference_upper: float
    confidence: float


def canary_decision(
    canary_rewards: np.ndarray,
    production_rewards: np.ndarray,
    *,
    min_requests: int,
    confidence: float = DEFAULT_CONFIDENCE,
    tolerance: float = 0.0,
    max_requests: int | None = None,
    canary_clusters: Sequence[str | None] | None = None,
    production_clusters: Sequence[str | None] | None = None,
) -> CanaryDecision:
    """Judge a canary from realised per-request rewards (suppressed requests count as 0).

    CONTINUE while either arm has fewer than ``min_requests``; ROLLBACK when the upper bound of
    canary - production is below ``-tolerance`` (significantly worse); PROMOTE when the lower
    bound is above ``-tolerance``; at ``max_requests`` canary requests the sign of the point
    difference + tolerance decides. ``*_clusters`` (each request's user, or each trial's task
    group) make the standard errors cluster-robust: arms are split by user and one user's
    requests are correlated (as are one task's trials), so treating them as independent would
    overstate the evidence. CanaryError for a confidence outside [0.5, 1) or ``min_requests``
    below 2.
    """
    if not 0.5 <= confidence < 1.0 or min_requests < 2:
        raise CanaryError(
            f"canary confidence {confidence} must be in [0.5, 1) and min_requests "
            f"{min_requests} >= 2."
        )
    canary = np.asarray(canary_rewards, dtype=np.float64)
    production = np.asarray(production_rewards, dtype=np.float64)
    n_c, n_p = len(canary), len(production)
    mean_c = float(canary.mean()) if n_c else 0.0
    mean_p = float(production.mean()) if n_p else 0.0
    lower, upper = -np.inf, np.inf
    if n_c >= 2 and n_p >= 2:
        se = float(np.sqrt(_mean_variance(canary, canary_clusters)
                           + _mean_variance(production, production_clusters)))  # fmt: skip
        z = NormalDist().inv_cdf(confidence)
        lower, upper = mean_c - mean_p - z * se, mean_c - mean_p + z * se
    verdict, why = _canary_verdict(
        n_c, n_p, mean_c - mean_p, lower, upper, min_requests, tolerance, max_requests
    )
    reason = (
        f"{why}: canary {mean_c:.4f} vs production {mean_p:.4f} reward/request over {n_c} / "
        f"{n_p} requests, difference bounds [{lower:+.4f}, {upper:+.4f}] at {confidence:.0%}"
    )
    return CanaryDecision(
        verdict, reason, n_c, n_p, mean_c, mean_p, float(lower), float(upper), confidence
    )


def _mean_variance(values: np.ndarray, users: Sequence[str | None] | None) -> float:
    """Variance of the mean of ``values``: per request, or clustered by user when given.

    Cluster-robust: sum over users of (their sum of residuals)^2 / n^2, times G / (G - 1) for G
    users; requests without a user count as their own cluster.
    """
    n = len(values)
    if users is None:
        return float(values.var(ddof=1) / n)
    residual = values - values.mean()
    keys = [u if u is not None else f"\0{i}" for i, u in enumerate(users)]
    _, cluster = np.unique(np.asarray(keys, dtype=object), return_inverse=True)
    sums = np.bincount(cluster, weights=residual)
    g = len(sums)
    if g < 2:
        return float(values.var(ddof=1) / n)
    return float((sums**2).sum() / n**2 * g / (g - 1))


def _canary_verdict(
    n_c: int,
    n_p: int,
    difference: float,
    lower: float,
    upper: float,
    min_requests: int,
    tolerance: float,
    max_requests: int | None,
) -> tuple[CanaryVerdict, str]:
    if min(n_c, n_p) < min_requests:
        return CanaryVerdict.CONTINUE, f"waiting for {min_requests} requests per arm"
    if upper < -tolerance:
        return CanaryVerdict.ROLLBACK, "canary is significantly worse"
    if lower > -tolerance:
        return CanaryVerdict.PROMOTE, "canary is not worse than production"
    if max_requests is not None and n_c >= max_requests:
        if difference >= -tolerance:
            return CanaryVerdict.PROMOTE, "undecided at max_requests; point estimate not worse"
        return CanaryVerdict.ROLLBACK, "undecided at max_requests; point estimate worse"
    return CanaryVerdict.CONTINUE, "not yet significant either way"
