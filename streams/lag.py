"""Consumer-group lag seen from outside the group (what a dashboard or the demo shows), and
positioning a new group at the topics' ends (a run that must not inherit earlier backlogs)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.topic_io import watermarks


class LagProbe:
    """Reads committed offsets of consumer groups and the topics' high watermarks.

    One probe keeps an admin client and a metadata consumer open; call :meth:`close` when done.
    """

    def __init__(self, kafka_config: Mapping[str, Any]) -> None:
        self._admin = AdminClient(dict(kafka_config))
        self._consumer = Consumer(
            {**kafka_config, "group.id": "flywheel.lag-probe", "enable.auto.commit": False}
        )

    def lag(self, group: str, topics: Iterable[str], timeout_s: float = 5.0) -> int | None:
        """Messages ``group`` has yet to commit on ``topics`` (None if unknown right now).

        A partition without a committed offset counts from its low watermark, so a group that
        has not started yet shows everything as lag.
        """
        try:
            partitions = [
                TopicPartition(topic, p)
                for topic in topics
                for p in self._consumer.list_topics(topic, timeout=timeout_s)
                .topics[topic]
                .partitions
            ]
            request = [ConsumerGroupTopicPartitions(group, partitions)]
            result = self._admin.list_consumer_group_offsets(request)[group].result(timeout_s)
        except KafkaException:
            return None
        total = 0
        for tp in result.topic_partitions:
            low, high = watermarks(
                self._consumer, TopicPartition(tp.topic, tp.partition), timeout_s
            )
            position = tp.offset if tp.offset >= 0 else low
            total += max(0, high - position)
        return total

    def close(self) -> None:
        self._consumer.close()


def start_group_at_end(
    kafka_config: Mapping[str, Any], group: str, topics: Iterable[str], timeout_s: float = 10.0
) -> int:
    """Commit the current end of every partition of ``topics`` as ``group``'s offsets, so a
    consumer of that group starts with what arrives from now on; returns the partitions set."""
    consumer = Consumer({**kafka_config, "group.id": group, "enable.auto.commit": False})
    try:
        ends = []
        for topic in topics:
            for p in consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions:
                _, high = watermarks(consumer, TopicPartition(topic, p), timeout_s)
                ends.append(TopicPartition(topic, p, high))
        consumer.commit(offsets=ends, asynchronous=False)
        return len(ends)
    finally:
        consumer.close()
