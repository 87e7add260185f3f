"""`stack down` then `stack up` keeps topics, data and schemas; `up` is idempotent."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from flywheel.cli import cli
from flywheel.settings import Settings
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
    assert local.down() == ["registry", "kafka"]
    assert not any(s.running for s in local.status())
    assert sorted(local.up()) == ["kafka", "registry"]

    assert unique in TopicAdmin(stack.kafka_client_config()).existing_partitions()
    assert read_topic(unique, 1) == [(b"k", b"survives")]
    fresh = SchemaRegistryClient({"url": stack.registry_url})  # no client-side cache
    assert json.loads(fresh.get_schema(schema_id).schema_str)["name"] == "Kept"
    assert fresh.get_latest_version(f"{unique}-value").schema_id == schema_id


def test_demo_runs_the_data_path_and_the_lake_agrees_with_ground_truth(
    stack: Settings, tmp_path: Path
) -> None:
    env = {"FLYWHEEL_LAKE": str(tmp_path / "lake")}
    result = CliRunner().invoke(cli, ["demo", "--requests", "300"], env=env)
    assert result.exit_code == 0, result.output
    text = re.sub(r"[\s│]+", " ", result.output)  # the table wraps cells at the terminal width
    assert "avro round trip" in text
    assert "0 drifted" in text
    truth = re.search(r"([\d,]+) shown, accept rate ([\d.]+)", text)  # the simulator's row
    lake = re.search(r"([\d,]+) shown in the lake, accept rate ([\d.]+)", text)
    assert truth is not None, result.output
    assert lake is not None, result.output
    assert truth.groups() == lake.groups()  # every shown suggestion and outcome reached Parquet
