"""LakeSink's decisions without a broker: resuming from the files, orphans, errors, catching up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from processors.lake import LakeSink
from processors.lake.errors import LakeError

TOPIC = "test.units"


class NoCodec:
    def decode(self, topic: str, data: bytes) -> dict[str, Any]:
        raise AssertionError("not reached in these tests")


class AssigningConsumer:
    """Stands in for the consumer passed to the rebalance callbacks."""

    def __init__(self) -> None:
        self.assigned: list[TopicPartition] = []

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = partitions


class ErrorMessage:
    def __init__(self, partition: int) -> None:
        self._partition = partition

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self._partition


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[LakeSink]:
    # Nothing listens on port 1: the clients are created but never connect in these tests.
    config = {"bootstrap.servers": "127.0.0.1:1", "log_level": "0"}
    made = LakeSink(config, NoCodec(), tmp_path, [TOPIC], decode_as={TOPIC: "telemetry.edits"})
    yield made
    made.abort()


def touch(lake: Path, name: str, hour: str = "hour=00") -> Path:
    directory = lake / TOPIC / "dt=2026-01-01" / hour
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).touch()
    return directory / name


def test_partitions_resume_after_the_largest_last_on_disk_and_orphans_go(
    sink: LakeSink, tmp_path: Path
) -> None:
    touch(tmp_path, f"{TOPIC}+0+0+99.parquet")
    touch(tmp_path, f"{TOPIC}+0+100+149.parquet", "hour=01")
    orphan = touch(tmp_path, f".{TOPIC}+0+150+199.parquet.ab12.tmp", "hour=01")
    other_orphan = touch(tmp_path, f".{TOPIC}+3+0+9.parquet.cd34.tmp")  # not ours to remove
    consumer = AssigningConsumer()
    sink._on_assign(consumer, [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])  # type: ignore[arg-type]
    assert [(p.partition, p.offset) for p in consumer.assigned] == [(0, 150), (1, OFFSET_BEGINNING)]
    assert not orphan.exists() and other_orphan.exists()
    assert not sink.caught_up()


def test_end_of_partition_events_mark_it_caught_up(sink: LakeSink) -> None:
    sink._on_assign(AssigningConsumer(), [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])  # type: ignore[arg-type]
    eof = KafkaError(KafkaError._PARTITION_EOF)
    sink._on_error(ErrorMessage(0), eof)  # type: ignore[arg-type]
    assert not sink.caught_up()
    sink._on_error(ErrorMessage(1), eof)  # type: ignore[arg-type]
    assert sink.caught_up()


@pytest.mark.parametrize(
    "error",
    [KafkaError(KafkaError._FATAL, "fenced"), KafkaError(KafkaError._FENCED, "x", fatal=True)],
)
def test_a_fatal_consumer_error_stops_the_sink(sink: LakeSink, error: KafkaError) -> None:
    with pytest.raises(LakeError, match="instance-id"):
        sink._on_error(ErrorMessage(0), error)  # type: ignore[arg-type]


def test_other_consumer_errors_are_logged_and_ignored(
    sink: LakeSink, caplog: pytest.LogCaptureFixture
) -> None:
    sink._on_error(ErrorMessage(0), KafkaError(KafkaError._TRANSPORT, "broker down"))  # type: ignore[arg-type]
    assert "broker down" in caplog.text
