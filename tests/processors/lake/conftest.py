"""Fixtures of the lake sink's integration tests: a codec and per-test topics."""

from __future__ import annotations

import pytest

from flywheel.settings import Settings
from streams.admin import TopicAdmin
from streams.serde import AvroCodec
from streams.topics import TopicSpec
from tests.processors.lake.lake_harness import MakeTopics

PARTITIONS = 4


@pytest.fixture
def codec(stack: Settings) -> AvroCodec:
    return AvroCodec.for_url(stack.registry_url)


@pytest.fixture
def make_topics(stack: Settings, unique: str) -> MakeTopics:
    """Creates `<unique>.<suffix>` topics (PARTITIONS partitions; 1 for names ending in dlq)."""

    def make(*suffixes: str) -> list[str]:
        names = [f"{unique}.{s}" for s in suffixes]
        specs = [
            TopicSpec(n, "key", "value", 1 if n.endswith("dlq") else PARTITIONS) for n in names
        ]
        TopicAdmin(stack.kafka_client_config()).ensure(specs)
        return names

    return make
