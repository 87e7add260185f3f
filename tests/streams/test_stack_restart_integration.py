"""`stack down` then `stack up` keeps topics, data, schemas and objects; `up` is idempotent."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from flywheel.settings import Settings
from ground.storage import StorageLocation
from streams.admin import TopicAdmin
from streams.stack.local import LocalStack
from streams.topics import TopicSpec
from tests.conftest import ReadTopic

pytestmark = pytest.mark.integration


def test_up_is_idempotent(stack: Settings) -> None:
    if not stack.uses_local_stack:
        pytest.skip("an external cluster is configured: there is no local stack to start")
    assert LocalStack(stack.home, stack.ports).up() == []


def test_down_then_up_keeps_topics_data_and_schemas(
    stack: Settings, unique: str, read_topic: ReadTopic
) -> None:
    if not stack.uses_local_stack:
        pytest.skip("an external cluster is configured: there is no local stack to restart")
    admin = TopicAdmin(stack.kafka_client_config())
    admin.ensure([TopicSpec(unique, "k", "v", 1)])
    producer = Producer(stack.kafka_client_config())
    producer.produce(unique, key=b"k", value=b"survives")
    assert producer.flush(30) == 0
    registry = SchemaRegistryClient({"url": stack.registry_url})
    schema = json.dumps(
        {"type": "record", "name": "Kept", "fields": [{"name": "a", "type": "int"}]}
    )
    schema_id = registry.register_schema(f"{unique}-value", Schema(schema, "AVRO"))
    local = LocalStack(stack.home, stack.ports)
    objects = StorageLocation.parse(f"s3://flywheel/{unique}", local.s3.client_environment())
    with objects.filesystem().open_output_stream(f"{objects.path}/kept") as out:
        out.write(b"survives too")

    assert local.down() == ["registry", "s3", "kafka"]
    assert not any(s.running for s in local.status())
    assert sorted(local.up()) == ["kafka", "registry", "s3"]

    assert unique in TopicAdmin(stack.kafka_client_config()).existing_partitions()
    assert read_topic(unique, 1) == [(b"k", b"survives")]
    fresh = SchemaRegistryClient({"url": stack.registry_url})  # no client-side cache
    assert json.loads(fresh.get_schema(schema_id).schema_str)["name"] == "Kept"
    assert fresh.get_latest_version(f"{unique}-value").schema_id == schema_id
    with objects.filesystem().open_input_stream(f"{objects.path}/kept") as kept:
        assert kept.read() == b"survives too"
