"""Reading events back from the real broker with confluent-kafka's stock AvroDeserializer.

Topics are shared between tests (and grow on a developer's stack), so a test marks the end
offsets before it produces and reads only from there, picking its records by event_id.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from flywheel.settings import Settings

Offsets = Mapping[tuple[str, int], int]


@dataclass(frozen=True)
class ReadRecord:
    topic: str
    partition: int
    key: bytes | None
    record: dict[str, Any]


def _consumer(settings: Settings) -> Consumer:
    return Consumer({**settings.kafka_client_config(), "group.id": f"read-{uuid.uuid4()}"})


def _ends(consumer: Consumer, topics: Iterable[str]) -> dict[tuple[str, int], int]:
    ends = {}
    for topic in topics:
        for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            ends[topic, p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
    return ends


def end_offsets(settings: Settings, topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """The current end offset of every partition of `topics`: call before producing."""
    consumer = _consumer(settings)
    try:
        return _ends(consumer, topics)
    finally:
        consumer.close()


def read_events(
    settings: Settings,
    topics: Iterable[str],
    event_ids: Iterable[str],
    since: Offsets | None = None,
    timeout_s: float = 60,
) -> list[ReadRecord]:
    """The records of `topics` whose event_id is wanted, in log order per partition, from
    `since` (default: the beginning) up to the end offsets at the time of the call."""
    wanted = set(event_ids)
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": settings.registry_url}))
    consumer = _consumer(settings)
    found: list[ReadRecord] = []
    try:
        ends = _ends(consumer, topics)
        starts = {tp: (since or {}).get(tp, 0) for tp in ends}
        consumer.assign([TopicPartition(t, p, starts[t, p]) for (t, p) in ends])
        pending = {tp for tp, end in ends.items() if end > starts[tp]}
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            record = deserialize(msg.value(), SerializationContext(topic, MessageField.VALUE))
            if str(record["event_id"]) in wanted:
                found.append(ReadRecord(topic, partition, msg.key(), record))
            if offset + 1 >= ends[topic, partition]:
                pending.discard((topic, partition))
    finally:
        consumer.close()
    return found
