"""The online processor against the real broker and registry: Avro Rewards in, values,
FeatureUpdates and a dead letter out."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from feature_store.declarations import load_features
from feature_store.online import OnlineFeatureStore
from feature_store.processor import FeatureProcessor
from flywheel.settings import Settings
from streams.admin import TopicAdmin
from streams.serde import AvroCodec
from streams.topics import TopicSpec
from tests.feature_store.feature_events import MINUTE_MS, T0_MS, reward

pytestmark = pytest.mark.integration


def read_all(
    settings: Settings, topic: str, group: str, count: int
) -> list[tuple[bytes | None, bytes | None, dict[str, str]]]:
    consumer = Consumer(
        {**settings.kafka_client_config(), "group.id": group, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[tuple[bytes | None, bytes | None, dict[str, str]]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                raw: list[tuple[str, bytes]] = list(msg.headers() or [])  # type: ignore[arg-type]
                headers = {k: v.decode() for k, v in raw}
                key, value = msg.key(), msg.value()
                assert not isinstance(key, str) and not isinstance(value, str)
                got.append((key, value, headers))
    finally:
        consumer.close()
    return got


def test_processor_computes_values_updates_and_dead_letters(stack: Settings, unique: str) -> None:
    source, updates, dlq = f"{unique}.rewards", f"{unique}.updates", f"{unique}.dlq"
    TopicAdmin(stack.kafka_client_config()).ensure(
        [
            TopicSpec(source, "k", "v", 4),
            TopicSpec(updates, "k", "v", 4),
            TopicSpec(dlq, "k", "v", 1),
        ]
    )
    codec = AvroCodec.for_url(stack.registry_url)
    records = [
        reward(T0_MS + k * MINUTE_MS, user=f"user:{k % 3}", accepted=k % 4 == 0, language="go")
        for k in range(60)
    ]
    producer = Producer({**stack.kafka_client_config(), "partitioner": "murmur2_random"})
    for k, record in enumerate(records):
        producer.produce(source, codec.encode("rewards", record), f"sess-{k % 7}".encode())
        if k == 30:
            producer.produce(source, b"not avro at all", b"sess-bad")
    producer.flush(30)

    store = OnlineFeatureStore(load_features())
    processor = FeatureProcessor(
        stack.kafka_client_config(), codec, store,
        topics={source: "rewards"}, updates_topic=updates, dlq=dlq, flush_every_s=0.2,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    status = processor.run(lambda: time.monotonic() > deadline, until_caught_up=True)
    assert status.caught_up and status.records == 60
    assert status.dead_letters == {"bad_magic": 1}

    expected = OnlineFeatureStore(load_features())
    expected.ingest("rewards", records)
    for user in ["user:0", "user:1", "user:2"]:
        assert store.get("user", user) == expected.get("user", user)
    got = store.get("user", "user:0", ["accept_rate_24h", "requests_24h"])
    assert got["user.requests_24h"].value == 20.0
    assert got["user.accept_rate_24h"].value == pytest.approx(
        expected.get("user", "user:0")["user.accept_rate_24h"].value
    )

    # 3 users x 4 user features + 3 user_language + 1 model_version + 1 repo pairs, at least once
    letters = read_all(stack, dlq, f"{unique}.dlq-reader", 1)
    assert len(letters) == 1
    key, value, headers = letters[0]
    assert key == b"sess-bad" and value == b"not avro at all"
    assert headers["flywheel.cause"] == "bad_magic" and headers["flywheel.stage"] == "features"
    assert headers["flywheel.topic"] == source

    messages = read_all(stack, updates, f"{unique}.updates-reader", status.updates)
    assert len(messages) == status.updates >= 17
    latest: dict[bytes, dict[str, object]] = {}
    for key, value, _ in messages:
        assert key is not None and value is not None
        latest[key] = codec.decode("features.updates", value)
    final = latest[b"user:user:0:requests_24h:24h"]
    assert final["value"] == 20.0 and final["source_event_count"] == 20
    assert final["entity_type"] == "user" and final["window"] == "24h"
    mean = latest[b"model_version:suggestion-gate@1:reward_mean_1h:1h"]
    assert mean["value"] == pytest.approx(
        expected.get("model_version", "suggestion-gate@1")["model_version.reward_mean_1h"].value
    )
