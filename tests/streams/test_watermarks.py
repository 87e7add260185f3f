"""Watermark reads wait out a new partition's leader election and raise anything else at once.

(The race is real: CI once failed reading a topic created a moment earlier, with
NOT_LEADER_FOR_PARTITION; the stub below stands in for the consumer's one method.)"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.topic_io import watermarks


class _Consumer:
    def __init__(self, failures: list[int]) -> None:
        self.failures = failures
        self.calls = 0

    def get_watermark_offsets(self, partition: TopicPartition, **_: Any) -> tuple[int, int]:
        self.calls += 1
        if self.failures:
            raise KafkaException(KafkaError(self.failures.pop(0)))
        return 3, 7


def test_a_partition_without_a_leader_yet_is_retried() -> None:
    consumer = _Consumer([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE])
    assert watermarks(consumer, TopicPartition("t", 0), 5.0) == (3, 7)  # type: ignore[arg-type]
    assert consumer.calls == 3


def test_other_errors_and_a_lasting_election_raise() -> None:
    consumer = _Consumer([KafkaError._TIMED_OUT])
    with pytest.raises(KafkaException):
        watermarks(consumer, TopicPartition("t", 0), 5.0)  # type: ignore[arg-type]
    assert consumer.calls == 1
    forever = _Consumer([KafkaError.NOT_LEADER_FOR_PARTITION] * 100)
    with pytest.raises(KafkaException):
        watermarks(forever, TopicPartition("t", 0), 0.3)  # type: ignore[arg-type]
    assert 1 < forever.calls < 100
