"""A smoke check of the whole Kafka path: one Avro record through the registry and the broker.

It uses confluent-kafka's stock AvroSerializer / AvroDeserializer, so a pass proves that a
foreign Confluent client interoperates with the configured registry and broker.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from streams.errors import StackError
from streams.topics import PROBE_TOPIC

PROBE_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "StackProbe",
        "namespace": "flywheel.v1",
        "doc": "A smoke-check record round-tripped through the registry and the broker.",
        "fields": [
            {"name": "probe_id", "type": {"type": "string", "logicalType": "uuid"},
             "doc": "Unique id of this probe; the consumer matches it."},
            {"name": "sent_at", "type": {"type": "long", "logicalType": "timestamp-millis"},
             "doc": "When the probe was produced (producer clock)."},
            {"name": "host", "type": "string", "doc": "Host name of the producing process."},
        ],
    }
)  # fmt: skip


@dataclass(frozen=True)
class ProbeResult:
    """Where the probe landed and how long the round trip took."""

    topic: str
    partition: int
    offset: int
    schema_id: int
    round_trip_ms: float
    record: dict[str, Any]


def round_trip(
    client_config: Mapping[str, str], registry_url: str, timeout_s: float = 30.0
) -> ProbeResult:
    """Produce one StackProbe to `_flywheel.probe` and read it back by partition and offset.

    Raises StackError when the record is not delivered, not read back within `timeout_s`, or
    read back different from what was sent.
    """
    registry = SchemaRegistryClient({"url": registry_url})
    context = SerializationContext(PROBE_TOPIC.name, MessageField.VALUE)
    sent = {
        "probe_id": uuid.uuid4(),
        "sent_at": datetime.now(UTC).replace(microsecond=0),
        "host": socket.gethostname(),
    }
    started = time.perf_counter()
    value = AvroSerializer(registry, PROBE_SCHEMA)(sent, context)
    if value is None:
        raise StackError("the AvroSerializer produced no bytes for the probe")
    delivered = _produce(client_config, str(sent["probe_id"]), value, timeout_s)
    received = _read_at(client_config, delivered, timeout_s)
    back = AvroDeserializer(registry)(received.value(), context)
    elapsed_ms = (time.perf_counter() - started) * 1000
    if back != sent:
        raise StackError(f"the probe came back different: sent {sent}, received {back}")
    return ProbeResult(
        PROBE_TOPIC.name,
        delivered.partition() or 0,
        delivered.offset() or 0,
        int.from_bytes(value[1:5], "big"),  # Confluent wire format: magic byte, 4-byte schema id
        elapsed_ms,
        sent,
    )


def _produce(config: Mapping[str, str], key: str, value: bytes, timeout_s: float) -> Message:
    producer = Producer(
        {**config, "enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random"}
    )
    reports: list[tuple[Any, Message]] = []
    producer.produce(
        PROBE_TOPIC.name, key=key.encode(), value=value,
        on_delivery=lambda err, msg: reports.append((err, msg)),
    )  # fmt: skip
    producer.flush(timeout_s)
    if not reports:
        raise StackError(f"the probe was not delivered within {timeout_s:.0f}s; is the broker up?")
    error, message = reports[0]
    if error is not None:
        raise StackError(f"the broker refused the probe: {error}")
    return message


def _read_at(config: Mapping[str, str], at: Message, timeout_s: float) -> Message:
    consumer = Consumer(
        {**config, "group.id": f"_flywheel.probe.{uuid.uuid4()}", "enable.auto.commit": False}
    )
    try:
        # A delivered message always has its topic, partition and offset set.
        consumer.assign([TopicPartition(PROBE_TOPIC.name, at.partition() or 0, at.offset() or 0)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                raise StackError(f"reading the probe back failed: {message.error()}")
            if message.offset() == at.offset():
                return message
        raise StackError(f"the probe was not read back within {timeout_s:.0f}s")
    finally:
        consumer.close()
