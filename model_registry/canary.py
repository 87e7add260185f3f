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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from streams.errors import DecodeError
from streams.serde import AvroCodec
from streams.topics import REWARDS_TOPIC


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
