"""The canary's online evidence: realised rewards of canary and production from `rewards`.

A monitor starts reading every partition of the rewards topic at its end when the canary
starts, so it only counts rewards attributed while both versions serve, and keeps the per-request
rewards of the two versions (suggestion rewards of one reward function and model).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from streams.serde import AvroCodec, DecodeError

REWARDS_TOPIC = "rewards"


class CanaryMonitor:
    """Collects rewards of ``canary_version`` and ``production_version`` of ``model_name``."""

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
    ) -> None:
        self._codec, self._topic = codec, topic
        self._model, self._fn = model_name, reward_fn
        self._arms: dict[int, list[float]] = {canary_version: [], production_version: []}
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
                r = self._codec.decode(self._topic, value)
            except DecodeError:
                continue  # the sink dead-letters it; the canary just does not count it
            arm = self._arms.get(r["model_version"])
            if (
                arm is not None
                and r["model_name"] == self._model
                and r["reward_fn"] == self._fn
                and r["source"] == "SUGGESTION"
            ):
                arm.append(float(r["reward"]))
                counted += 1
        return counted

    def rewards(self) -> tuple[np.ndarray, np.ndarray]:
        """(canary rewards, production rewards), one value per request."""
        return (
            np.asarray(self._arms[self.canary_version]),
            np.asarray(self._arms[self.production_version]),
        )

    def close(self) -> None:
        self._consumer.close()
