"""Reading events back from the real broker with confluent-kafka's stock AvroDeserializer."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from flywheel.settings import Settings


def read_events(
    settings: Settings, topic: str, event_ids: Iterable[str], timeout_s: float = 30
) -> list[tuple[bytes, int, dict[str, Any]]]:
    """(key, partition, record) of the records of `topic` whose event_id is wanted, in log order
    per partition, read with the stock AvroDeserializer from the beginning of every partition."""
    wanted = set(event_ids)
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": settings.registry_url}))
    ctx = SerializationContext(topic, MessageField.VALUE)
    consumer = Consumer({**settings.kafka_client_config(), "group.id": f"read-{uuid.uuid4()}"})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions}  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    found: list[tuple[bytes, int, dict[str, Any]]] = []
    done: set[int] = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + timeout_s
    try:
        while len(done) < len(partitions) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            record = deserialize(msg.value(), ctx)
            if str(record["event_id"]) in wanted:
                found.append((msg.key(), msg.partition(), record))
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
    finally:
        consumer.close()
    return found
