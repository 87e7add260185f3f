"""Round trips against the real local broker and registry (DESIGN §2)."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from flywheel.settings import Settings
from streams.admin import TopicAdmin
from streams.probe import round_trip
from streams.topics import ALL_TOPICS, TopicSpec
from tests.conftest import ReadTopic

pytestmark = pytest.mark.integration


def _create(settings: Settings, name: str, partitions: int = 1) -> TopicSpec:
    spec = TopicSpec(name, "k", "bytes", partitions)
    assert TopicAdmin(settings.kafka_client_config()).ensure([spec]).created == [name]
    return spec


def test_confluent_kafka_round_trip(stack: Settings, unique: str, read_topic: ReadTopic) -> None:
    _create(stack, unique, partitions=3)
    producer = Producer(
        {**stack.kafka_client_config(), "enable.idempotence": True, "acks": "all",
         "partitioner": "murmur2_random", "compression.type": "zstd"}
    )  # fmt: skip
    sent = [(f"session-{i % 7}".encode(), f"value-{i}".encode()) for i in range(50)]
    for key, value in sent:
        producer.produce(unique, key=key, value=value)
    assert producer.flush(30) == 0
    got = read_topic(unique, len(sent))
    assert sorted(got) == sorted(sent)


def test_aiokafka_round_trip(stack: Settings, unique: str) -> None:
    """aiokafka is the client faust uses; Kafka 4 removed the protocol versions older ones spoke."""
    _create(stack, unique)

    async def run() -> list[tuple[bytes | None, bytes | None]]:
        producer = AIOKafkaProducer(bootstrap_servers=stack.kafka_bootstrap, acks="all")
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(unique, key=b"k%d" % i, value=b"v%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            unique, bootstrap_servers=stack.kafka_bootstrap, group_id=unique,
            auto_offset_reset="earliest",
        )  # fmt: skip
        await consumer.start()
        got = []
        try:
            while len(got) < 10:
                msg = await asyncio.wait_for(consumer.getone(), timeout=30)
                got.append((msg.key, msg.value))
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(run())
    assert got == [(b"k%d" % i, b"v%d" % i) for i in range(10)]


def _schema(*fields: dict[str, object]) -> str:
    return json.dumps(
        {"type": "record", "name": "Thing", "namespace": "flywheel.test", "fields": list(fields)}
    )


def test_registry_round_trip_with_stock_confluent_serdes(
    stack: Settings, unique: str, read_topic: ReadTopic
) -> None:
    _create(stack, unique)
    registry = SchemaRegistryClient({"url": stack.registry_url})
    schema = _schema({"name": "id", "type": "string"}, {"name": "n", "type": "long"})
    ctx = SerializationContext(unique, MessageField.VALUE)
    value = AvroSerializer(registry, schema)({"id": "a", "n": 7}, ctx)
    assert value is not None and value[0] == 0  # Confluent wire format: magic byte 0
    producer = Producer(stack.kafka_client_config())
    producer.produce(unique, value=value)
    producer.flush(30)
    [(_, raw)] = read_topic(unique, 1)
    assert AvroDeserializer(registry)(raw, ctx) == {"id": "a", "n": 7}
    schema_id = int.from_bytes(value[1:5], "big")
    assert json.loads(registry.get_schema(schema_id).schema_str)["name"] == "Thing"


def test_incompatible_schema_is_refused_with_409(stack: Settings, unique: str) -> None:
    registry = SchemaRegistryClient({"url": stack.registry_url})
    subject = f"{unique}-value"
    registry.register_schema(subject, Schema(_schema({"name": "id", "type": "string"}), "AVRO"))
    registry.set_compatibility(subject, "BACKWARD")
    # A new required field without a default cannot read old data: not BACKWARD compatible.
    breaking = _schema({"name": "id", "type": "string"}, {"name": "n", "type": "long"})
    with pytest.raises(SchemaRegistryError) as refused:
        registry.register_schema(subject, Schema(breaking, "AVRO"))
    assert refused.value.http_status_code == 409
    compatible = _schema(
        {"name": "id", "type": "string"}, {"name": "n", "type": "long", "default": 0}
    )
    assert registry.register_schema(subject, Schema(compatible, "AVRO")) > 0


def test_topics_are_created_idempotently_and_drift_is_reported(
    stack: Settings, unique: str
) -> None:
    admin = TopicAdmin(stack.kafka_client_config())
    assert admin.ensure(ALL_TOPICS).drift == []  # the fixture created them as declared
    declared = TopicSpec(unique, "k", "v", 2, "compact", None)
    assert admin.ensure([declared]).created == [unique]
    again = admin.ensure([declared])
    assert again.created == [] and again.existing == [unique] and again.drift == []
    drifted = TopicSpec(unique, "k", "v", 3, "delete", None)
    found = {(d.setting, d.declared, d.actual) for d in admin.drift([drifted])}
    assert found == {("partitions", "3", "2"), ("cleanup.policy", "delete", "compact")}


def test_the_probe_round_trips_through_registry_and_broker(stack: Settings) -> None:
    result = round_trip(stack.kafka_client_config(), stack.registry_url)
    assert result.schema_id > 0
    assert result.offset >= 0


def test_a_group_started_at_the_end_sees_only_what_arrives_later(
    stack: Settings, unique: str
) -> None:
    from confluent_kafka import Consumer

    from streams.lag import LagProbe, start_group_at_end

    _create(stack, unique, partitions=2)
    producer = Producer(stack.kafka_client_config())
    for i in range(10):
        producer.produce(unique, key=f"k{i}".encode(), value=b"before")
    assert producer.flush(30) == 0
    group = f"{unique}.group"
    assert start_group_at_end(stack.kafka_client_config(), group, [unique]) == 2
    probe = LagProbe(stack.kafka_client_config())
    try:
        assert probe.lag(group, [unique]) == 0  # the backlog is behind the group
    finally:
        probe.close()
    producer.produce(unique, key=b"k", value=b"after")
    assert producer.flush(30) == 0
    consumer = Consumer({**stack.kafka_client_config(), "group.id": group,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([unique])
    try:
        seen = []
        for _ in range(30):
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                seen.append(msg.value())
            if seen:
                break
        assert seen == [b"after"]
    finally:
        consumer.close()
