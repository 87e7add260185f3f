"""The lake tests' harness: produce records, read dead letters, check what the lake holds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import duckdb
from confluent_kafka import Consumer, KafkaError, Message, Producer

from analytics.catalog import Catalog
from analytics.topic_views import parquet_sql, view_name
from contracts.lake_layout import range_problems, scan_topic
from flywheel.settings import Settings
from ground.store import Store

# make_topics(*suffixes) -> the created topics' names (the conftest fixture)
MakeTopics = Callable[..., list[str]]


@dataclass(frozen=True)
class Produced:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def produce(
    settings: Settings, items: Iterable[tuple[str, bytes | None, bytes | None]]
) -> list[Produced]:
    """Produce (topic, key, value) items in order (idempotent, murmur2); where each one went,
    in the order of `items`."""
    producer = Producer(
        {**settings.kafka_client_config(), "enable.idempotence": True, "linger.ms": 10,
         "partitioner": "murmur2_random", "message.max.bytes": 2_000_000}
    )  # fmt: skip
    done: dict[int, Produced] = {}
    failed: list[str] = []

    def delivered(index: int, error: KafkaError | None, msg: Message) -> None:
        if error is not None:
            failed.append(str(error))
            return
        done[index] = Produced(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())  # type: ignore[arg-type]

    for index, (topic, key, value) in enumerate(items):
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=partial(delivered, index))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(30)
    assert not failed, failed
    return [done[i] for i in sorted(done)]


@dataclass(frozen=True)
class Letter:
    key: bytes | None
    value: bytes
    headers: dict[str, str]


def read_letters(
    settings: Settings, topic: str, count: int, group: str, wait_s: float = 20
) -> list[Letter]:
    """Up to `count` records of a DLQ topic, then whatever else arrives within 1 s."""
    consumer = Consumer(
        {**settings.kafka_client_config(), "group.id": group, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[Letter] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            got.append(Letter(msg.key(), msg.value() or b"", _headers(msg)))
            if len(got) == count:
                deadline = min(deadline, time.monotonic() + 1.0)  # catch extra (duplicate) ones
    finally:
        consumer.close()
    return got


def _headers(msg: Message) -> dict[str, str]:
    raw = msg.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return {k: v.decode() if isinstance(v, bytes) else str(v or "") for k, v in pairs}


def lake_rows(
    lake: Path | Store, topic: str, columns: str = "event_id, _partition, _offset"
) -> list[tuple[object, ...]]:
    """Rows of a topic in the lake, read the way analysts do (the catalog's view SQL: hive
    partitions typed, since DuckDB reads `hour=00`..`09` as text when it infers; in an object
    store, the catalog's registered dataset)."""
    if isinstance(lake, Store):
        with Catalog(lake).connect() as con:
            return con.execute(f"select {columns} from {view_name(topic)}").fetchall()
    relation = duckdb.sql(f"select {columns} from ({parquet_sql(lake.resolve(), topic)})")
    assert relation is not None  # a select always has a result
    return relation.fetchall()


def assert_ranges_tile(lake: Path | Store, topic: str, ends: dict[int, int]) -> None:
    """Per partition, the files tile [0, ends[p]] exactly: contiguous, non-overlapping."""
    files = scan_topic(lake, topic).files
    assert sorted(files) == sorted(ends), (sorted(files), ends)
    for partition, last in ends.items():
        assert range_problems(files[partition], start=0) == [], partition
        assert files[partition][-1].last == last, (partition, files[partition][-1], last)


def last_offsets(produced: Iterable[Produced], topic: str) -> dict[int, int]:
    ends: dict[int, int] = {}
    for p in produced:
        if p.topic == topic:
            ends[p.partition] = max(ends.get(p.partition, -1), p.offset)
    return ends
