"""What the sink reports while it runs: throughput, files, dead letters, lag."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from confluent_kafka import Consumer, KafkaException, TopicPartition


@dataclass
class SinkStatus:
    """Counters since the sink started; `rows_per_s` is over the last reporting interval."""

    records: int = 0  # messages consumed (dead letters and tombstones included)
    rows: int = 0  # rows in renamed files
    files: int = 0
    bytes_written: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)  # cause -> count
    tombstones: int = 0
    stale: int = 0  # messages below a partition's resume offset, ignored
    partitions: int = 0  # assigned now
    lag: dict[str, int] = field(default_factory=dict)  # "topic/partition" -> messages behind
    rows_per_s: float = 0.0

    def copy(self) -> SinkStatus:
        return replace(self, dead_letters=Counter(self.dead_letters), lag=dict(self.lag))

    def line(self) -> str:
        """A one-line summary for a terminal."""
        dlq = ", ".join(f"{c}={n}" for c, n in sorted(self.dead_letters.items())) or "none"
        behind = f"{sum(self.lag.values()):,}" if self.lag else "unknown"
        return (
            f"{self.records:,} read | {self.rows_per_s:,.0f} rows/s | "
            f"{self.rows:,} rows in {self.files:,} files "
            f"({self.bytes_written / 1e6:,.1f} MB) | dead letters: {dlq} | "
            f"{self.partitions} partition(s), lag {behind}"
        )


def consumer_lag(
    consumer: Consumer, positions: dict[tuple[str, int], int | None]
) -> dict[str, int]:
    """`topic/partition` -> messages between the next offset to read and the high watermark
    the consumer saw last (no broker call); partitions with either unknown are left out."""
    lag: dict[str, int] = {}
    for (topic, partition), position in positions.items():
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
        except KafkaException:
            continue
        if position is not None and high >= 0:
            lag[f"{topic}/{partition}"] = max(0, high - position)
    return lag
